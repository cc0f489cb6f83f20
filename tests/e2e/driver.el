;;; driver.el --- Drive *amacs-shell* in batch Emacs for end-to-end tests -*- lexical-binding: t -*-

;;; Commentary:

;; Loaded by tests/e2e/harness.py.  Types into the real shell, waits for
;; the real server, and writes the shell's text to $AMACS_E2E_OUT.

;;; Code:

(add-to-list 'package-directory-list "/usr/share/emacs/site-lisp/elpa")
(package-initialize)
(setq load-prefer-newer t)
(add-to-list 'load-path (expand-file-name "../../elisp" (file-name-directory load-file-name)))
(require 'amacs)

(setq amacs-server-command (list (getenv "AMACS_E2E_PYTHON") "-m" "amacs_server"))

(defvar amacs-e2e-timeout 60
  "Seconds any one wait may take.")

(defun amacs-e2e-wait (predicate what)
  "Wait until PREDICATE returns non-nil; fail the run naming WHAT."
  (let ((deadline (+ (float-time) amacs-e2e-timeout)))
    (while (and (not (funcall predicate)) (< (float-time) deadline))
      (accept-process-output nil 0.02))
    (unless (funcall predicate)
      (amacs-e2e-dump)
      (princ (format "E2E TIMEOUT waiting for %s\n" what))
      (kill-emacs 3))))

(defun amacs-e2e-open ()
  "Open the shell and wait for the server."
  (amacs-shell)
  (amacs-e2e-wait #'amacs-live-p "the server")
  (accept-process-output nil 0.05))

(defun amacs-e2e-send (text)
  "Type TEXT into the shell, press RET and wait for the turn to end."
  (with-current-buffer amacs-shell-buffer-name
    (goto-char (point-max))
    (insert text)
    (comint-send-input))
  (amacs-e2e-wait (lambda () (not amacs-shell-busy)) (format "a reply to %S" text))
  (accept-process-output nil 0.05))

(defun amacs-e2e-send-no-wait (text)
  "Type TEXT into the shell and press RET."
  (with-current-buffer amacs-shell-buffer-name
    (goto-char (point-max))
    (insert text)
    (comint-send-input)))

(defun amacs-e2e-wait-text (text)
  "Wait until the shell shows TEXT."
  (amacs-e2e-wait (lambda () (with-current-buffer amacs-shell-buffer-name
                               (save-excursion (goto-char (point-min)) (search-forward text nil t))))
                  (format "%S in the shell" text)))

(defun amacs-e2e-wait-disconnect ()
  "Wait until the server has gone."
  (amacs-e2e-wait (lambda () (not (amacs-live-p))) "the server to stop"))

(defun amacs-e2e-crash-server ()
  "Kill the server with SIGKILL, as a crash would, and wait until it is gone."
  (signal-process (process-id (amacs-server-process)) 'SIGKILL)
  (amacs-e2e-wait-disconnect))

(defun amacs-e2e-dump ()
  "Write the shell's text to $AMACS_E2E_OUT."
  (let ((buf (get-buffer amacs-shell-buffer-name)))
    (when buf
      (with-current-buffer buf
        (write-region (point-min) (point-max) (getenv "AMACS_E2E_OUT") nil 'silent)))))

(defun amacs-e2e-visible ()
  "The shell's text as the person sees it: an eval's hidden details left out."
  (with-current-buffer amacs-shell-buffer-name
    (let ((out "") (pos (point-min)))
      (while (< pos (point-max))
        (let ((next (next-single-char-property-change pos 'invisible nil (point-max))))
          (unless (invisible-p pos) (setq out (concat out (buffer-substring-no-properties pos next))))
          (setq pos next)))
      out)))

(defun amacs-e2e-finish ()
  "Dump the shell, stop the server, exit 0."
  (amacs-e2e-dump)
  (amacs-stop-server)
  (kill-emacs 0))

(provide 'driver)
;;; driver.el ends here
