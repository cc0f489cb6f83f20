;;; amacs-render.el --- Replies shown as org, with org's own font-lock -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The agent writes its replies in org markup (the server turns Markdown
;; into org before a reply is shown or stored), and the shell shows them
;; as org shows them: the text is fontified by `org-mode' itself in a
;; work buffer, source blocks in their own language's mode
;; (`org-src-fontify-natively'), and the faces are copied onto the
;; shell's text as `font-lock-face', which the shell's own font-lock
;; leaves alone.  No highlighter of our own: what org draws is what you
;; see.  The text itself stays plain, so copying it copies org.

;;; Code:

(require 'subr-x)

(defvar org-src-fontify-natively)
(defvar org-hide-emphasis-markers)
(defvar org-mode-hook)
(declare-function org-mode "org")

(defcustom amacs-render-org t
  "Whether replies are shown with org's fontification.
nil shows them as plain text."
  :type 'boolean
  :group 'amacs)

(defcustom amacs-render-hide-emphasis-markers t
  "Whether the markers of org emphasis (*bold*, /italic/, ~code~) are hidden.
The text keeps them: copying a reply copies its org markup."
  :type 'boolean
  :group 'amacs)

(defconst amacs--render-buffer " *amacs-org-render*"
  "Work buffer where replies are fontified by `org-mode'.")

(defconst amacs--render-properties '(face invisible)
  "Text properties copied from the org work buffer onto the shell's text.
`face' becomes `font-lock-face'.")

(defun amacs--render-work-buffer ()
  "Return the org work buffer, creating it in `org-mode' once."
  (or (get-buffer amacs--render-buffer)
      (with-current-buffer (get-buffer-create amacs--render-buffer)
        (require 'org)
        (let ((org-mode-hook nil))
          (org-mode))
        (setq-local org-src-fontify-natively t)
        (current-buffer))))

(defun amacs-render-org (text)
  "Return TEXT (org markup) fontified as `org-mode' fontifies it.
Faces are carried as `font-lock-face'; link brackets and other text org
hides carry `invisible' (add `org-link' to the shell's invisibility spec)."
  (if (or (not amacs-render-org) (string-empty-p text))
      text
    (with-current-buffer (amacs--render-work-buffer)
      (let ((inhibit-read-only t)
            (inhibit-modification-hooks nil))
        (erase-buffer)
        (setq-local org-hide-emphasis-markers amacs-render-hide-emphasis-markers)
        (insert text)
        (condition-case err
            (font-lock-ensure)
          (error (message "AMACS: org could not fontify a reply: %s" (error-message-string err))))
        (let ((out (substring-no-properties (buffer-string))))
          (dolist (prop amacs--render-properties)
            (let ((pos (point-min)))
              (while (< pos (point-max))
                (let ((next (next-single-property-change pos prop nil (point-max)))
                      (value (get-text-property pos prop)))
                  (when value
                    (put-text-property (1- pos) (1- next)
                                       (if (eq prop 'face) 'font-lock-face prop)
                                       value out))
                  (setq pos next)))))
          out)))))

(defun amacs-render-prepare-buffer ()
  "Set up the current buffer to show rendered org: hidden link brackets."
  (add-to-invisibility-spec 'org-link))

(defun amacs-render-preload ()
  "Load org, then fontify once, at two idle moments: the first reply does not wait.
Loading org takes about 0.25 s and the first fontification of a source
block about 0.5 s more; each runs only when Emacs has been idle a while."
  (unless (get-buffer amacs--render-buffer)
    (run-with-idle-timer
     0.5 nil
     (lambda ()
       (ignore-errors (amacs--render-work-buffer))
       (run-with-idle-timer
        1.0 nil
        (lambda () (ignore-errors (amacs-render-org "*a* ~b~\n#+begin_src emacs-lisp\n(ignore)\n#+end_src"))))))))

;;;; Copying

(defun amacs-render--src-block-at (pos)
  "Return (BEG . END) of the code of the org source block around POS, or nil."
  (save-excursion
    (goto-char pos)
    (let ((case-fold-search t))
      (when (re-search-backward "^[ \t]*#\\+\\(begin_src\\|begin_example\\|end_src\\|end_example\\)" nil t)
        (when (member (downcase (match-string 1)) '("begin_src" "begin_example"))
          (let ((beg (line-beginning-position 2)))
            (when (re-search-forward "^[ \t]*#\\+end_\\(src\\|example\\)" nil t)
              (let ((end (line-beginning-position)))
                (when (and (<= (save-excursion (goto-char beg) (line-beginning-position 0)) pos)
                           (<= pos (line-end-position)))
                  (cons beg end))))))))))

(defun amacs-render-code-at-point ()
  "Return the code of the source block at point (plain text), or nil."
  (let ((block (amacs-render--src-block-at (point))))
    (and block (buffer-substring-no-properties (car block) (cdr block)))))

(provide 'amacs-render)
;;; amacs-render.el ends here
