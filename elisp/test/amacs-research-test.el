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
      (cl-letf (((symbol-function 'browse-url-of-file) (lambda (file) (setq opened file))))
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
              (cl-letf (((symbol-function 'browse-url-of-file) (lambda (file) (setq opened file))))
                (amacs-hub-visit)))
            (should (equal opened (amacs-report-file dir))))
        (kill-buffer amacs-hub-buffer-name)))))

(provide 'amacs-research-test)
;;; amacs-research-test.el ends here
