;;; amacs-changes.el --- What the agent's evals changed, listed after each turn -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The agent works in buffers the person may never look at.  While an
;; agent's eval runs, the first change of each buffer keeps that
;; buffer's text from before it, and the first write of each file keeps
;; the file's bytes from before it.  When the turn ends, the shell shows
;; one line of what changed, with the lines each gained and lost:
;;
;;   ▸ changed: notes (buffer, +1 line), ~/x.py (file, +3 −1)
;;
;; RET on it shows the changes as a diff (diff-mode), then offers to put
;; each changed buffer back as it was.  A buffer that visits a file and
;; was saved is listed as that file.

;;; Code:

(require 'cl-lib)
;; diff-mode (and easy-mmode, which it loads: 5-20 ms of a launch's CPU on two loaded cores)
;; is loaded when a diff is first shown: `diff-mode' is autoloaded.
(require 'amacs-transport)
(require 'amacs-eval)
(require 'amacs-shell-output)

(defvar amacs-changes--recording nil
  "The connection whose agent's eval runs now, or nil.
Its turn's changes are kept on it (`amacs-changes--of').")

(defun amacs-changes--of (connection)
  "Return CONNECTION's record of the turn so far: (BUFFERS . FILES).
BUFFERS is an alist (BUFFER . TEXT-BEFORE); FILES an alist (FILE .
BYTES-BEFORE), BYTES-BEFORE nil for a file that did not exist.  Each
list is newest first."
  (let ((ui (amacs-connection-ui connection)))
    (or (amacs-ui-changes ui)
        (setf (amacs-ui-changes ui) (cons nil nil)))))

(defconst amacs-changes--emacs-logs
  '("*Messages*" "*Native-compile-Log*" "*Compile-Log*" "*Warnings*" "*Async-native-compile-log*")
  "Emacs's own logs, which it writes to whatever runs.")

(defun amacs-changes--watched-p (buffer)
  "Return non-nil when the agent's edits of BUFFER are to be listed.
Not the minibuffer, not an internal buffer (its name starts with a
space), not AMACS's own buffers nor *Messages*."
  (let ((name (buffer-name buffer)))
    (and name
         (not (minibufferp buffer))
         (not (string-prefix-p " " name))
         (not (string-prefix-p "*amacs" name))
         (not (member name amacs-changes--emacs-logs)))))

(defun amacs-changes--before-change (&rest _)
  "Keep the current buffer's text from before the eval first changed it."
  (when amacs-changes--recording
    (let ((changes (amacs-changes--of amacs-changes--recording)))
      (unless (or (assq (current-buffer) (car changes))
                  (not (amacs-changes--watched-p (current-buffer))))
        (push (cons (current-buffer) (save-restriction (widen) (buffer-substring-no-properties
                                                                (point-min) (point-max))))
              (car changes))))))

(defun amacs-changes--file-bytes (file)
  "FILE's bytes on disk as a unibyte string, or nil when it is not there.
Read past the eval's file name handler: this is no read of the agent's."
  (let ((inhibit-file-name-handlers (cons #'amacs--eval-file-handler inhibit-file-name-handlers))
        (inhibit-file-name-operation 'insert-file-contents))
    (and (file-regular-p file)
         (condition-case nil
             (with-temp-buffer
               (set-buffer-multibyte nil)
               (insert-file-contents-literally file)
               (buffer-string))
           (file-error nil)))))

(defun amacs-changes--before-file-change (operation args)
  "Keep the bytes of the files OPERATION on ARGS will alter.
Kept before the eval first alters each.  On
`amacs-eval-file-change-functions': the file written, copied or linked
onto, renamed (both names) or deleted by an agent's eval."
  (when amacs-changes--recording
    (let ((changes (amacs-changes--of amacs-changes--recording)))
      (dolist (file (pcase operation
                      ('write-region (list (nth 2 args)))
                      ((or 'copy-file 'make-symbolic-link 'add-name-to-file) (list (nth 1 args)))
                      ('rename-file (list (nth 0 args) (nth 1 args)))
                      ('delete-file (list (nth 0 args)))))
        (when (and (stringp file) (not (amacs--emacs-own-file-p file)))
          (let ((path (expand-file-name file)))
            (unless (or (file-directory-p path) (assoc path (cdr changes)))
              (push (cons path (amacs-changes--file-bytes path)) (cdr changes)))))))))

(add-hook 'amacs-eval-file-change-functions #'amacs-changes--before-file-change)

(defvar amacs-changes--stack nil
  "The connections recording before the running evals began, innermost first.")

(defun amacs-changes--eval-start (_event)
  "Begin to keep, for its connection's turn, what an agent's eval alters."
  (push amacs-changes--recording amacs-changes--stack)
  (setq amacs-changes--recording (amacs-current-connection))
  (add-hook 'before-change-functions #'amacs-changes--before-change))

(defun amacs-changes--eval-done (_event _result)
  "Stop keeping what the eval alters, unless an outer eval is still at work."
  (setq amacs-changes--recording (pop amacs-changes--stack))
  (unless amacs-changes--recording
    (remove-hook 'before-change-functions #'amacs-changes--before-change)))

(add-hook 'amacs-eval-start-functions #'amacs-changes--eval-start)
(add-hook 'amacs-eval-done-functions #'amacs-changes--eval-done)

;;;; The turn's changes

(cl-defstruct (amacs-change (:constructor amacs-change--make) (:copier nil))
  "One thing a turn's evals changed.
KIND is `buffer' or `file'; NAME what the line calls it; BUFFER the
buffer (a buffer change); BEFORE and AFTER its text, or the file's
bytes (nil: no file); DIFF the unified diff; ADDED and REMOVED its
lines."
  kind name buffer before after diff added removed)

(defun amacs-changes--diff (name before after)
  "The unified diff of BEFORE and AFTER (strings, nil for none), labelled NAME."
  (let ((old (make-temp-file "amacs-old"))
        (new (make-temp-file "amacs-new"))
        (coding-system-for-write 'no-conversion)
        (coding-system-for-read 'utf-8))
    (unwind-protect
        (progn
          (let ((inhibit-file-name-handlers (cons #'amacs--eval-file-handler inhibit-file-name-handlers))
                (inhibit-file-name-operation 'write-region))
            (write-region (or before "") nil old nil 'silent)
            (write-region (or after "") nil new nil 'silent))
          (with-temp-buffer
            (call-process "diff" nil t nil "-u" "--label" (concat "a/" name) "--label" (concat "b/" name)
                          old new)
            (buffer-string)))
      (delete-file old)
      (delete-file new))))

(defun amacs-changes--counted (kind name buffer before after)
  "The `amacs-change' of KIND NAME (BUFFER for a buffer) from BEFORE to AFTER.
Nil when nothing differs."
  (unless (equal before after)
    (let* ((text (lambda (s) (and s (if (multibyte-string-p s) s (decode-coding-string s 'utf-8)))))
           (diff (amacs-changes--diff name (funcall text before) (funcall text after)))
           (added 0) (removed 0))
      (dolist (line (split-string diff "\n"))
        (cond ((string-prefix-p "+++ " line)) ((string-prefix-p "--- " line))
              ((string-prefix-p "+" line) (cl-incf added))
              ((string-prefix-p "-" line) (cl-incf removed))))
      (amacs-change--make :kind kind :name name :buffer buffer :before before :after after
                          :diff diff :added added :removed removed))))

(defun amacs-changes--collect (connection)
  "Return what CONNECTION's turn changed so far, oldest first; forget it.
A buffer that visits a file and matches it (saved) is not listed as a
buffer: what it wrote is listed as its file."
  (let* ((changes (amacs-changes--of connection))
         (files (mapcar #'car (cdr changes)))
         (out nil))
    (setf (amacs-ui-changes (amacs-connection-ui connection)) nil)
    (dolist (entry (reverse (car changes)))
      (let ((buffer (car entry)))
        (when (and (buffer-live-p buffer)
                   (not (and (buffer-file-name buffer)
                             (or (not (buffer-modified-p buffer))
                                 (member (expand-file-name (buffer-file-name buffer)) files)))))
          (let ((change (amacs-changes--counted
                         'buffer (buffer-name buffer) buffer (cdr entry)
                         (with-current-buffer buffer
                           (save-restriction (widen) (buffer-substring-no-properties (point-min) (point-max)))))))
            (when change (push change out))))))
    (dolist (entry (reverse (cdr changes)))
      (let ((change (amacs-changes--counted 'file (abbreviate-file-name (car entry)) nil
                                            (cdr entry) (amacs-changes--file-bytes (car entry)))))
        (when change (push change out))))
    (nreverse out)))

(defun amacs-changes--counts (change)
  "CHANGE's lines gained and lost, in a few characters: +3 −1, +1 line."
  (let ((added (amacs-change-added change))
        (removed (amacs-change-removed change)))
    (cond ((and (> added 0) (> removed 0)) (format "+%d −%d" added removed))
          ((> added 0) (format "+%d line%s" added (if (= added 1) "" "s")))
          ((> removed 0) (format "−%d line%s" removed (if (= removed 1) "" "s")))
          (t "changed"))))

(defun amacs-changes-line (list)
  "Return the shell's line that names each of LIST, with its counts.
▸ changed: NAME (KIND, COUNTS), ..."
  (concat "▸ changed: "
          (mapconcat (lambda (c)
                       (format "%s (%s, %s)" (amacs-change-name c)
                               (cond ((eq (amacs-change-kind c) 'buffer) "buffer")
                                     ((null (amacs-change-after c)) "file deleted")
                                     ((null (amacs-change-before c)) "new file")
                                     (t "file"))
                               (amacs-changes--counts c)))
                     list ", ")))

(defun amacs-changes--on-turn-done (event)
  "Show on one line what the turn's evaluations changed, if anything.
The line is kept by the tick the turn ended at (EVENT's), to be shown
again with its turn (`amacs-changes-kept')."
  (let ((changes (amacs-changes--collect (amacs-current-connection))))
    (when (and changes (amacs-shell--buffer))
      (let ((line (propertize (amacs-changes-line changes)
                              'amacs-changes changes
                              'help-echo "RET: the diff, and undo a buffer's change")))
        (when (natnump (plist-get event :tick))
          (amacs-changes--keep (amacs-current-connection) (plist-get event :tick) line))
        (amacs-shell--output line 'amacs-shell-eval)))))

;;;; The lines shown again

;; The chat log (what a rewind or a new shell shows again) holds what was said, not what an
;; eval changed in this Emacs: that is known here only, for the turns this Emacs saw.

(defconst amacs-changes--kept-turns 100
  "The number of turns whose ▸ changed line a connection keeps, to show again.")

(defun amacs-changes--keep (connection tick line)
  "Keep LINE, the ▸ changed line of CONNECTION's turn that ended at TICK."
  (let* ((ui (amacs-connection-ui connection))
         (kept (or (amacs-ui-changed ui) (cons nil nil))))
    (setcdr kept (let ((all (cons (cons tick line) (assq-delete-all tick (cdr kept)))))
                   (butlast all (- (length all) amacs-changes--kept-turns))))
    (setf (amacs-ui-changed ui) kept)))

(defun amacs-changes-kept (connection tick)
  "Return the ▸ changed lines kept for CONNECTION up to TICK, oldest first.
Each is (TICK . LINE), TICK the tick its turn ended at.  The lines of
later ticks are forgotten: the mind is at TICK (a rewind went back),
and a tick after it is another turn.  The turns that ended at TICK or
before, when first asked, are older than this Emacs: they show no line,
none being known (`amacs-changes-seen-since')."
  (let* ((ui (amacs-connection-ui connection))
         (kept (or (amacs-ui-changed ui) (cons tick nil))))
    (setcar kept (min (or (car kept) tick) tick))
    (setcdr kept (cl-remove-if-not (lambda (entry) (<= (car entry) tick)) (cdr kept)))
    (setf (amacs-ui-changed ui) kept)
    (reverse (cdr kept))))

(defun amacs-changes-seen-since (connection)
  "The first tick whose turn CONNECTION's shell saw in this Emacs, or nil.
Set by `amacs-changes-kept', when a shell first shows the conversation."
  (car (amacs-ui-changed (amacs-connection-ui connection))))

(defun amacs-changes-fork (parent fork tick)
  "Give FORK, a fork of PARENT at TICK, PARENT's ▸ changed lines up to TICK."
  (setf (amacs-ui-changed (amacs-connection-ui fork))
        (cons (min (or (amacs-changes-seen-since parent) tick) tick)
              (cl-remove-if-not (lambda (entry) (<= (car entry) tick))
                                (cdr (amacs-ui-changed (amacs-connection-ui parent)))))))

(amacs-on-event "turn-done" #'amacs-changes--on-turn-done)

;;;; Showing and undoing

(defconst amacs-changes-buffer "*amacs-changes*"
  "The buffer that shows a turn's changes as a diff.")

(defun amacs-changes-show (list)
  "Show the diff of each of LIST, then offer to undo a buffer's.
A buffer changed since the turn is not put back: its newer text would
be lost."
  (with-current-buffer (get-buffer-create amacs-changes-buffer)
    (let ((inhibit-read-only t))
      (erase-buffer)
      (dolist (change list) (insert (amacs-change-diff change)))
      (goto-char (point-min))
      (diff-mode)
      (setq buffer-read-only t)))
  (display-buffer amacs-changes-buffer)
  (dolist (change list)
    (let ((buffer (amacs-change-buffer change)))
      (when (and (eq (amacs-change-kind change) 'buffer) (buffer-live-p buffer)
                 (y-or-n-p (format "Undo the agent's change to buffer %s (%s)? "
                                   (buffer-name buffer) (amacs-changes--counts change))))
        (with-current-buffer buffer
          (if (not (equal (save-restriction (widen) (buffer-substring-no-properties (point-min) (point-max)))
                          (amacs-change-after change)))
              (message "AMACS: %s changed since the agent's turn; not undone" (buffer-name buffer))
            (let ((inhibit-read-only t))
              (save-restriction
                (widen)
                (atomic-change-group
                  (delete-region (point-min) (point-max))
                  (insert (amacs-change-before change)))))
            (message "AMACS: %s is as it was before the agent's turn (undo brings the change back)"
                     (buffer-name buffer))))))))

(defun amacs-changes-at (pos)
  "Return the list of what was altered that the line at POS names, or nil."
  (get-text-property pos 'amacs-changes))

(provide 'amacs-changes)
;;; amacs-changes.el ends here
