;;; amacs-research-test.el --- ERT tests of M-x amacs-report -*- lexical-binding: t -*-

;;; Commentary:

;; Issue 15: `amacs-report' runs `amacs-server report RUNS_DIR' (the
;; server command with two more arguments) in the background and opens
;; RUNS_DIR/report.html; a folder without a report is a clear
;; `user-error'.  A fake server command (a shell script) stands in for
;; the server.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'amacs-research)
(require 'magit-section)
(declare-function amacs-hub-mode "amacs-hub" ())
(declare-function amacs-hub--render "amacs-hub" (state))
(declare-function amacs-hub-visit "amacs-hub" ())
(defvar amacs-hub-buffer-name)

(defmacro amacs-research-test--in-temp (var &rest body)
  "Run BODY with VAR a fresh temporary folder, deleted afterwards."
  (declare (indent 1))
  `(let ((,var (file-name-as-directory (make-temp-file "amacs-research-test" t)))
         (amacs-report-last-directory nil)
         (amacs-runs-directory nil))
     (unwind-protect (progn ,@body)
       (delete-directory ,var t))))

(ert-deftest amacs-research-test-command ()
  "The report command is the server command, then report and the absolute folder."
  (let ((default-directory "/tmp/"))
    (should (equal (amacs-report-command "runs/debate/" '("/venv/bin/python" "-m" "amacs_server"))
                   '("/venv/bin/python" "-m" "amacs_server" "report" "/tmp/runs/debate")))
    (should (equal (amacs-report-command "/x/runs" '("amacs-server"))
                   '("amacs-server" "report" "/x/runs")))
    (let ((amacs-server-command '("amacs-server")))
      (should (equal (amacs-report-command "/x/runs") '("amacs-server" "report" "/x/runs"))))))

(ert-deftest amacs-research-test-missing-report ()
  "Opening a folder with no report.html is a user-error that says what to do."
  (amacs-research-test--in-temp dir
    (let ((err (should-error (amacs-report-open dir) :type 'user-error)))
      (should (string-match-p "No report in .*M-x amacs-report" (cadr err))))
    (should-not (amacs-report-last-file))
    (should-error (amacs-report (expand-file-name "nowhere" dir)) :type 'user-error)))

(ert-deftest amacs-research-test-report-runs-and-opens ()
  "The command runs in the background; when it writes report.html, it is opened."
  (amacs-research-test--in-temp dir
    (let* ((script (expand-file-name "fake-server" dir))
           (runs (expand-file-name "runs" dir))
           (opened nil)
           (ended nil)
           (amacs-report-finished-hook (list (lambda (_dir status) (setq ended status))))
           (amacs-server-command (list script "--flag")))
      (make-directory runs)
      (with-temp-file script
        (insert "#!/bin/sh\necho \"args: $*\"\necho '<html></html>' > \"$3/report.html\"\n"))
      (set-file-modes script #o755)
      (cl-letf (((symbol-function 'browse-url-of-file) (lambda (file) (setq opened file)))
                ((symbol-function 'amacs-report-browser-available-p) #'always))
        (let ((proc (amacs-report runs)))
          (while (not ended) (accept-process-output proc 0.05))))
      (should (equal ended 0))
      (should (equal opened (expand-file-name "report.html" runs)))
      (should (equal (amacs-report-last-file) opened))
      (with-current-buffer amacs-report-buffer-name
        (should (string-match-p (concat "args: --flag report " (regexp-quote runs)) (buffer-string)))
        (should (string-match-p "Report written: " (buffer-string)))))))

(ert-deftest amacs-research-test-report-fails ()
  "A failing command is reported in the buffer, and nothing is opened."
  (amacs-research-test--in-temp dir
    (let* ((script (expand-file-name "fake-server" dir))
           (opened nil)
           (ended nil)
           (amacs-report-finished-hook (list (lambda (_dir status) (setq ended status))))
           (amacs-server-command (list script)))
      (with-temp-file script (insert "#!/bin/sh\necho 'no runs here' >&2\nexit 2\n"))
      (set-file-modes script #o755)
      (cl-letf (((symbol-function 'browse-url-of-file) (lambda (file) (setq opened file))))
        (let ((proc (amacs-report dir)))
          (while (not ended) (accept-process-output proc 0.05))))
      (should (equal ended 2))
      (should-not opened)
      (with-current-buffer amacs-report-buffer-name
        (should (string-match-p "no runs here" (buffer-string)))
        (should (string-match-p "failed (exit 2)" (buffer-string)))))))

(ert-deftest amacs-research-test-hub-links-to-the-last-report ()
  "The hub shows a Report line when a report exists; RET on it opens the report."
  (require 'amacs-hub)
  (amacs-research-test--in-temp dir
    (let ((amacs-hub-buffer-name "*amacs-hub-research-test*")
          (state (list :identity "i" :tick 1 :mood "m" :confidence 0.5
                       :budget (list :cost-so-far 0.0 :budget-limit 1.0 :pressure "low")
                       :session (list :input-tokens 0 :output-tokens 0 :cache-read-tokens 0
                                      :cache-write-tokens 0 :cost 0.0)
                       :chat-log "/tmp/agent-chat.org"))
          (opened nil))
      (with-current-buffer (get-buffer-create amacs-hub-buffer-name)
        (amacs-hub-mode)
        (let ((inhibit-read-only t))
          (magit-insert-section (amacs-hub) (magit-insert-heading "waiting"))))
      (unwind-protect
          (progn
            (amacs-hub--render state)
            (with-current-buffer amacs-hub-buffer-name
              (should-not (string-match-p "Report: " (buffer-string))))
            (setq amacs-report-last-directory dir)
            (with-temp-file (amacs-report-file dir) (insert "<html></html>"))
            (amacs-hub--render state)
            (with-current-buffer amacs-hub-buffer-name
              (goto-char (point-min))
              (should (search-forward "Report: " nil t))
              (cl-letf (((symbol-function 'browse-url-of-file) (lambda (file) (setq opened file)))
                        ((symbol-function 'amacs-report-browser-available-p) #'always))
                (amacs-hub-visit))
              (should (equal opened (amacs-report-file dir)))
              ;; In a terminal Emacs with no browser, RET says where the report is.
              (setq opened nil)
              (goto-char (point-min))
              (search-forward "Report: ")
              (let ((kill-ring nil))
                (cl-letf (((symbol-function 'browse-url-of-file) (lambda (file) (setq opened file)))
                          ((symbol-function 'amacs-report-browser-available-p) #'ignore))
                  (amacs-hub-visit))
                (should-not opened)
                (should (equal (car kill-ring) (amacs-report-file dir))))))
        (kill-buffer amacs-hub-buffer-name)))))

;; Issue 15, item 10: a terminal Emacs with no browser.

(defmacro amacs-research-test--no-display (&rest body)
  "Run BODY as in a terminal Emacs with no display: DISPLAY and WAYLAND_DISPLAY unset."
  (declare (indent 0))
  `(let ((process-environment (append '("DISPLAY" "WAYLAND_DISPLAY") process-environment)))
     (cl-letf (((symbol-function 'display-graphic-p) #'ignore))
       ,@body)))

(ert-deftest amacs-research-test-browser-available ()
  "No display and the default browse function: no browser; one set by the person counts; eww does not."
  (amacs-research-test--no-display
    (let ((browse-url-browser-function 'browse-url-default-browser))
      (should-not (getenv "DISPLAY"))
      (should-not (amacs-report-browser-available-p)))
    (let ((browse-url-browser-function 'eww-browse-url))
      (should-not (amacs-report-browser-available-p)))
    (let ((browse-url-browser-function 'browse-url-firefox))
      (should (amacs-report-browser-available-p))))
  (let ((process-environment (cons "DISPLAY=:0" process-environment))
        (browse-url-browser-function 'browse-url-default-browser))
    (cl-letf (((symbol-function 'executable-find) (lambda (name &rest _) (equal name "xdg-open"))))
      (should (amacs-report-browser-available-p)))
    (cl-letf (((symbol-function 'executable-find) #'ignore))
      (should-not (amacs-report-browser-available-p)))))

(ert-deftest amacs-research-test-no-browser-says-where ()
  "A report written in a terminal Emacs: the echo area and *amacs-report* say where it is; path in the kill ring."
  (amacs-research-test--in-temp dir
    (let* ((script (expand-file-name "fake-server" dir))
           (runs (expand-file-name "runs" dir))
           (file (expand-file-name "report.html" runs))
           (opened nil)
           (ended nil)
           (said nil)
           (kill-ring nil)
           (browse-url-browser-function 'browse-url-default-browser)
           (amacs-report-finished-hook (list (lambda (_dir status) (setq ended status))))
           (amacs-server-command (list script)))
      (make-directory runs)
      (with-temp-file script
        (insert "#!/bin/sh\necho '<html></html>' > \"$2/report.html\"\n"))
      (set-file-modes script #o755)
      (amacs-research-test--no-display
        (cl-letf (((symbol-function 'browse-url-of-file) (lambda (f) (setq opened f)))
                  ((symbol-function 'eww-browse-url) (lambda (&rest _) (setq opened 'eww)))
                  ((symbol-function 'message)
                   (lambda (fmt &rest args) (push (apply #'format fmt args) said))))
          (let ((proc (amacs-report runs)))
            (while (not ended) (accept-process-output proc 0.05)))))
      (should (equal ended 0))
      (should-not opened)
      (let ((expected (format "Report written: %s — open it in a browser (no browser here: set `browse-url-browser-function')"
                              file)))
        (should (member expected said))
        (with-current-buffer amacs-report-buffer-name
          (should (string-match-p (regexp-quote expected) (buffer-string)))))
      (should (equal (car kill-ring) file)))))

(ert-deftest amacs-research-test-prompt-starts-at-runs ()
  "The folder prompt starts at the last runs folder, else `amacs-runs-directory', else the newest runs folder."
  (amacs-research-test--in-temp dir
    (let ((old (expand-file-name "debate/runs/old/" dir))
          (new (expand-file-name "other/runs/new/" dir))
          (default-directory "/"))
      (should-not (amacs-report-newest-runs-directory dir))
      (dolist (runs (list old new))
        (make-directory runs t)
        (with-temp-file (expand-file-name "experiment.toml" runs) (insert "[experiment]\n")))
      (set-file-times (expand-file-name "experiment.toml" old) (time-subtract nil 3600))
      (should (equal (amacs-report-newest-runs-directory dir) new))
      (make-directory (expand-file-name "debate/runs/not-runs/" dir) t)  ; no experiment.toml: not a runs folder
      (should (equal (amacs-report-newest-runs-directory dir) new))
      (let ((amacs-report--experiments-directory dir)
            (asked nil))
        (cl-letf (((symbol-function 'read-directory-name)
                   (lambda (_prompt start &rest _) (setq asked start) start)))
          (should (equal (amacs-report--read-directory) new))
          (let ((amacs-runs-directory old))
            (should (equal (amacs-report--read-directory) old))
            (let ((amacs-report-last-directory "/tmp/"))
              (should (equal (amacs-report--read-directory) "/tmp/"))))
          (let ((amacs-report--experiments-directory (expand-file-name "nothing/" dir)))
            (should (equal (amacs-report--read-directory) "/"))))
        (should asked)))))

(provide 'amacs-research-test)
;;; amacs-research-test.el ends here
