;;; checkdoc-batch.el --- Run checkdoc on files in batch -*- lexical-binding: t -*-

;;; Commentary:

;; emacs -Q --batch -l scripts/checkdoc-batch.el FILE...
;; Exits non-zero and prints the diagnostics when any file has one.

;;; Code:

(require 'checkdoc)

(defun amacs-build-checkdoc-files (files)
  "Run checkdoc on FILES; return non-nil when all are clean."
  (let ((clean t)
        (checkdoc-spellcheck-documentation-flag nil))
    (dolist (file files)
      (when (get-buffer "*checkdoc*") (kill-buffer "*checkdoc*"))
      (with-current-buffer (find-file-noselect file)
        (let ((checkdoc-diagnostic-buffer "*checkdoc*"))
          (checkdoc-current-buffer t)))
      (with-current-buffer (get-buffer-create "*checkdoc*")
        (when (string-match-p ":[0-9]+: " (buffer-string))
          (setq clean nil)
          (princ (buffer-string)))))
    clean))

(kill-emacs (if (amacs-build-checkdoc-files command-line-args-left) 0 1))

;;; checkdoc-batch.el ends here
