;;; amacs-history.el --- Rewind the agent's mind to a past input, or fork it  -*- lexical-binding: t; -*-

;; This file is part of AMACS.

;;; Commentary:

;; Every tick of the agent is restorable (the server's persistence/history.py).
;; `amacs-rewind' picks one of your past inputs and, once you confirm, returns
;; the mind to just before it: a turn at work is interrupted first, the server
;; restores the home in place, and the shell shows the conversation up to there.
;; The future it leaves is never deleted: it stays on a git ref whose name the
;; shell and agent-chat.org give.  `amacs-fork' makes a new AMACS home holding
;; the mind at a past input, to open a second shell on.

;;; Code:

(require 'amacs-transport)
(require 'seq)

(declare-function amacs-shell--output "amacs-shell")
(declare-function amacs-shell--past-input "amacs-shell-output")
(declare-function amacs-shell--buffer "amacs-shell")
(declare-function amacs-shell--resume "amacs-shell")
(declare-function amacs-shell-open "amacs-shell")
(declare-function amacs-when-ready "amacs-server")
(defvar amacs-shell--resumed)
(defvar amacs--status)

(defun amacs-history--inputs ()
  "The past inputs the server knows of, newest first, as (LABEL . TICK)."
  (let ((status (amacs--call-sync 'status nil)) out)
    (dolist (entry (append (plist-get status :recent) nil))
      (let ((human (plist-get entry :human)) (tick (plist-get entry :tick)))
        (when (and (stringp human) (integerp tick))
          (push (cons (format "tick %d: %s" tick (truncate-string-to-width
                                                  (replace-regexp-in-string "\n" " " human) 70 nil nil "…"))
                      tick)
                out))))
    out))

(defun amacs-history--at-point (inputs)
  "The label in INPUTS of the past input point is on in the shell, or nil."
  (let ((said (and (derived-mode-p 'amacs-shell-mode) (fboundp 'amacs-shell--past-input)
                   (amacs-shell--past-input (point)))))
    (and said
         (car (seq-find (lambda (entry)
                          (string-suffix-p (truncate-string-to-width (replace-regexp-in-string "\n" " " said)
                                                                     70 nil nil "…")
                                           (car entry)))
                        inputs)))))

(defun amacs-history--read-input (verb)
  "Ask which past input to VERB before; return the tick that ends just before it.
The input point is on in the shell is the default, else the newest."
  (let* ((inputs (or (amacs-history--inputs) (user-error "No past input to %s before" verb)))
         (label (completing-read (format "%s to before: " (capitalize verb)) (mapcar #'car inputs) nil t
                                 nil nil (or (amacs-history--at-point inputs) (caar inputs))))
         (tick (1- (cdr (assoc label inputs)))))
    (when (< tick 1)
      (user-error "That is the first input: there is no tick before it to %s to" verb))
    tick))

;;;###autoload
(defun amacs-rewind (tick)
  "Return the agent's mind to the end of TICK: just before the input after it.
Interactively, pick one of your past inputs and confirm.  A turn at work
is interrupted first.  The abandoned future stays on a git ref, named in
the shell and in agent-chat.org."
  (interactive
   (let ((tick (amacs-history--read-input "rewind")))
     (unless (yes-or-no-p (format "Rewind the agent to the end of tick %d (a turn at work is interrupted)? "
                                  tick))
       (user-error "Not rewound"))
     (list tick)))
  (let* ((done (amacs--call-sync 'rewind (list tick)))
         (line (plist-get done :line)))
    (setf (amacs-connection-status (amacs-current-connection)) (amacs--call-sync 'status nil))
    (let ((buffer (and (fboundp 'amacs-shell--buffer) (amacs-shell--buffer))))
      (when buffer
        (with-current-buffer buffer
          (amacs-shell--output (concat ";; " line ". The conversation up to there:") 'amacs-shell-status)
          (setq amacs-shell--resumed nil)
          (amacs-shell--resume))))
    (message "AMACS: %s" line)
    done))

(defcustom amacs-fork-directory "~/"
  "Where `amacs-fork' proposes to make a new home."
  :type 'directory
  :group 'amacs)

;;;###autoload
(defun amacs-fork (tick dest)
  "Make DEST a new AMACS home holding the agent's mind at the end of TICK.
Interactively, pick one of your past inputs (the fork ends just before
it) and a new folder.  With a shell per home (`amacs-shell-open'), a
second shell opens on DEST beside this one."
  (interactive
   (let ((tick (amacs-history--read-input "fork")))
     (list tick (read-directory-name (format "New home for the fork at tick %d: " tick)
                                     amacs-fork-directory nil nil))))
  (let* ((done (amacs--call-sync 'fork (list tick (expand-file-name dest))))
         (line (plist-get done :line)))
    (message "AMACS: %s" line)
    (if (fboundp 'amacs-shell-open)
        (progn
          (select-window (split-window-right))
          (with-current-buffer (amacs-shell-open (plist-get done :home))
            ;; Once two homes are live every shell's header names its home: redraw them all
            ;; (the first shell's window shows nothing new that would redraw its header).
            (amacs-when-ready (lambda () (force-mode-line-update t)))))
      (message "AMACS: %s; open it with AMACS_HOME=%s (a shell per home is not in this Emacs yet)"
               line (plist-get done :home)))
    done))

(provide 'amacs-history)
;;; amacs-history.el ends here
