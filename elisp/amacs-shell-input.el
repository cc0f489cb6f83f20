;;; amacs-shell-input.el --- The AMACS shell's input history, compose buffer and context -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; What the person sends besides what is typed at the prompt, and what
;; is kept of it: the shell's input history (a file in the AMACS home,
;; appended at each RET, secrets scrubbed), the compose buffer for a
;; long prompt, and a region or a buffer of their own Emacs sent to the
;; agent.

;;; Code:

(eval-when-compile (require 'comint))
(require 'amacs-server)
(require 'amacs-shell-output)

(defvar amacs-shell-mode-map)

;;;; Input history (kept across sessions)

(defcustom amacs-shell-history-size 1000
  "Inputs kept in the shell's history, which persists across sessions."
  :type 'integer
  :group 'amacs)

(defun amacs-shell--save-history-everywhere ()
  "Save the history of every shell, one per home."
  (dolist (connection amacs--connections)
    (let ((buffer (amacs-ui-shell (amacs-connection-ui connection))))
      (when (buffer-live-p buffer)
        (with-current-buffer buffer (amacs-shell--save-history-safely))))))

(defvar-local amacs-shell--history-error nil
  "Non-nil once saving the history failed and was said; nil after a save works.")

(defun amacs-shell--save-history-safely (&optional sent)
  "Save the history; if its file cannot be written, say so once and go on.
SENT: the input just sent (`amacs-shell--save-history').  A read-only or
full AMACS home must not stop an input from being sent: the inputs stay
in this Emacs's ring."
  (condition-case err
      (progn (amacs-shell--save-history sent)
             (setq amacs-shell--history-error nil))
    (error
     (unless amacs-shell--history-error
       (setq amacs-shell--history-error t)
       (amacs-shell--note
        (format "Could not save the input history to %s (%s); your inputs stay in this Emacs: %s brings them back."
                comint-input-ring-file-name
                (if (and (eq (car err) 'file-error) (stringp (nth 2 err))) ; e.g. (file-error "Opening output file" "Read-only file system" FILE)
                    (nth 2 err)
                  (error-message-string err))
                (substitute-command-keys "\\<amacs-shell-mode-map>\\[comint-previous-input]")))))))

(defun amacs-shell--history-file ()
  "Return the file of the shell's input history."
  (expand-file-name "shell-history" (amacs-connection-home (amacs-current-connection))))

(defconst amacs-shell--history-separator "\0\n"
  "Between entries of the history file: an input of several lines stays one.")

(defvar-local amacs-shell--history-newest nil
  "The newest input already in the history file (an entry of the ring, by `eq').")

(defun amacs-shell--save-history (&optional sent)
  "Append the inputs entered since the last save to the history file.
Each entry is followed by `amacs-shell--history-separator', as
`comint-write-input-ring' writes them, so RET costs one short append
however long the history; `amacs-shell--read-history' trims the file.
The file is the record of every input, SENT (the input just sent) too
when it repeats the newest: the ring (\[comint-previous-input]) keeps a
repeat once (`comint-input-ignoredups'), but a rewind moves the file's
inputs after the tick it goes to onto the abandoned future, each of them."
  (when (and (derived-mode-p 'amacs-shell-mode) comint-input-ring-file-name
             (ring-p comint-input-ring))
    (let* ((ring comint-input-ring) (len (ring-length ring)) (i 0) new)
      (while (and (< i len) (not (eq (ring-ref ring i) amacs-shell--history-newest)))
        (let* ((entry (ring-ref ring i)) (clean (amacs--scrub entry)))
          (unless (eq clean entry)     ; a pasted key stays out of the file (and of M-p)
            (aset (cddr ring) (ring-index i (car ring) (ring-length ring) (ring-size ring)) clean))
          (push clean new))             ; ends oldest first
        (setq i (1+ i)))
      (when (and (not new) (stringp sent) (> len 0)
                 (eq (ring-ref ring 0) amacs-shell--history-newest)
                 (equal (amacs--scrub (string-trim sent)) (string-trim (ring-ref ring 0))))
        (setq new (list (ring-ref ring 0)))) ; the ring ignored it: a repeat of the newest
      (when new
        (with-file-modes #o700          ; private, as the server keeps the home: 0700, files 0600
          (make-directory (file-name-directory comint-input-ring-file-name) t)
          (let ((coding-system-for-write 'utf-8-unix))
            (if (and amacs-shell--history-newest (= i len))
                (amacs-shell--rewrite-history) ; the saved entry left the ring: write it whole
              (write-region (mapconcat (lambda (entry) (concat entry amacs-shell--history-separator))
                                       new "")
                            nil comint-input-ring-file-name 'append 'silent))))
        (setq amacs-shell--history-newest (ring-ref ring 0))))))

(defun amacs-shell--rewrite-history ()
  "Write the whole input ring to the history file."
  (let ((comint-input-ring-separator amacs-shell--history-separator)
        (coding-system-for-write 'utf-8-unix))
    (with-file-modes #o700 (comint-write-input-ring))))

(defun amacs-shell--read-history ()
  "Read the input history: its newest `comint-input-ring-size' entries.
A file from before entries were NUL-separated is read by line and
rewritten NUL-separated; one that appends made twice as long as the
ring is trimmed to it."
  (let* ((file comint-input-ring-file-name)
         (entries (and file (file-readable-p file)
                       (with-temp-buffer
                         (insert-file-contents file)
                         (cons (let ((n 0)) (while (search-forward "\0" nil t) (setq n (1+ n))) n)
                               (buffer-size)))))
         (comint-input-ring-separator (if (and entries (> (car entries) 0))
                                          amacs-shell--history-separator
                                        "\n")))
    ;; comint counts entries against the default size (in its temp buffer), not ours.
    (let ((default (default-value 'comint-input-ring-size)))
      (unwind-protect
          (progn (setq-default comint-input-ring-size comint-input-ring-size)
                 (comint-read-input-ring t))
        (setq-default comint-input-ring-size default)))
    (amacs-shell--drop-repeats)
    (setq amacs-shell--history-newest (and (ring-p comint-input-ring)
                                           (> (ring-length comint-input-ring) 0)
                                           (ring-ref comint-input-ring 0)))
    (when (and entries (or (and (= (car entries) 0) (> (cdr entries) 0))
                           (> (car entries) (* 2 comint-input-ring-size))))
      (amacs-shell--rewrite-history))))

(defun amacs-shell--drop-repeats ()
  "Keep one of each run of the same input in the ring, as typing does.
The file holds every input sent, a repeat too (`amacs-shell--save-history');
`comint-read-input-ring' checks a repeat only against the newest entry,
so \[comint-previous-input] would show each other repeat twice."
  (when (and comint-input-ignoredups (ring-p comint-input-ring))
    (let ((kept nil) (size (ring-size comint-input-ring)))
      (dolist (entry (ring-elements comint-input-ring)) ; newest first
        (unless (equal entry (car kept))
          (push entry kept)))               ; ends oldest first
      (when (< (length kept) (ring-length comint-input-ring))
        (setq comint-input-ring (make-ring size))
        (dolist (entry kept) (ring-insert comint-input-ring entry))))))

(defun amacs-shell--reread-history ()
  "Read the input ring (\\<amacs-shell-mode-map>\\[comint-previous-input]) again from the history file.
A rewind took the inputs of the future it abandoned out of the file:
they leave the ring too, whose older entries the file does not hold."
  (when (derived-mode-p 'amacs-shell-mode)
    (setq comint-input-ring (make-ring comint-input-ring-size)
          comint-input-ring-index nil
          amacs-shell--history-newest nil)
    (amacs-shell--read-history)))

;;;; The unsent input (kept across sessions)

(defcustom amacs-shell-draft-save-interval 2
  "Seconds between saves of the input typed at the prompt and not yet sent.
An Emacs that is killed loses at most this much typing; the input is
saved only when it changed, and at once when Emacs exits or the shell
buffer is killed."
  :type 'number
  :group 'amacs)

(defvar-local amacs-shell--draft-file nil
  "The file of this shell's unsent input, in its AMACS home.")

(defvar-local amacs-shell--draft-saved ""
  "The unsent input as the file has it (\"\" for none: no file).")

(defvar-local amacs-shell--draft-tick nil
  "`buffer-chars-modified-tick' when the unsent input was last saved.")

(defvar-local amacs-shell--draft-pending nil
  "The unsent input of last time, read and not yet back at the prompt, or nil.
It comes back once the last exchanges are shown: what is typed while
the shell starts is not glued to it, unseen, and sent with it.")

(defvar-local amacs-shell--draft-error nil
  "Non-nil once saving the unsent input failed and was said.
Nil again after a save works.")

(defvar amacs-shell--draft-timer nil
  "The timer that saves every shell's unsent input when it changed.")

(defun amacs-shell--draft ()
  "The input typed at the shell's prompt and not yet sent."
  (buffer-substring-no-properties
   (min (point-max) (+ amacs-shell--prompt-start (length amacs-shell-prompt))) (point-max)))

(defun amacs-shell--unanswered ()
  "The inputs not answered yet: those queued in the footer, then the prompt's.
Queued inputs were handed to the server, but a server that stops takes
them with it: kept with the prompt's, they come back at the next prompt."
  (let ((draft (amacs-shell--draft)))
    (string-join (append (amacs-shell--queued-inputs) (unless (string-blank-p draft) (list draft)))
                 "\n\n")))

(defun amacs-shell--save-draft ()
  "Save the inputs not answered yet if they changed since the last save.
These are the inputs queued in the footer and the one typed at the
prompt (`amacs-shell--unanswered').  None (or blank) removes the file:
answered text never comes back.  Secrets are scrubbed, as in the
history.  A file that cannot be written is said once; the input stays
at the prompt."
  (when (and (derived-mode-p 'amacs-shell-mode) amacs-shell--draft-file
             (markerp amacs-shell--prompt-start)
             (not (eql amacs-shell--draft-tick (buffer-chars-modified-tick))))
    (let ((draft (amacs--scrub (amacs-shell--unanswered)))
          (file amacs-shell--draft-file)
          (tick (buffer-chars-modified-tick)))
      (when (string-blank-p draft) (setq draft ""))
      (when amacs-shell--draft-pending    ; not back yet: it stays, with what was typed since
        (setq draft (if (string-empty-p draft) amacs-shell--draft-pending
                      (concat amacs-shell--draft-pending "\n" draft))))
      (if (equal draft amacs-shell--draft-saved)
          (setq amacs-shell--draft-tick tick)
        (condition-case err
            (progn
              (if (string-empty-p draft)
                  (when (file-exists-p file) (delete-file file))
                ;; Whole or not at all: written beside it, then renamed over it.
                (let ((temp (expand-file-name (concat "." (file-name-nondirectory file) ".tmp")
                                              (file-name-directory file)))
                      (coding-system-for-write 'utf-8-unix))
                  (with-file-modes #o700 ; private, as the server keeps the home: files 0600
                    (make-directory (file-name-directory file) t)
                    (write-region draft nil temp nil 'silent))
                  (rename-file temp file t)))
              (setq amacs-shell--draft-saved draft amacs-shell--draft-tick tick
                    amacs-shell--draft-error nil))
          (error
           (unless amacs-shell--draft-error
             (setq amacs-shell--draft-error t)
             (amacs-shell--note
              (format "Could not save your unsent input to %s (%s); it stays at the prompt while this Emacs runs."
                      file (error-message-string err))))))))))

(defun amacs-shell--save-drafts ()
  "Save the unsent input of every shell where it changed.
The timer that calls this stops once no shell is left."
  (let ((any nil))
    (dolist (connection amacs--connections)
      (let ((buffer (amacs-ui-shell (amacs-connection-ui connection))))
        (when (buffer-live-p buffer)
          (setq any t)
          (with-current-buffer buffer (amacs-shell--save-draft)))))
    (when (and (not any) amacs-shell--draft-timer)
      (cancel-timer amacs-shell--draft-timer)
      (setq amacs-shell--draft-timer nil))))

(defun amacs-shell--keep-draft (file)
  "Keep this shell's unsent input in FILE: restore it, and save it when changed.
What FILE holds comes back at the prompt, not sent, once the last
exchanges are shown (`amacs-shell--restore-draft')."
  (setq amacs-shell--draft-file file)
  (let ((draft (and (file-readable-p file)
                    (with-temp-buffer
                      (let ((coding-system-for-read 'utf-8)) (insert-file-contents file))
                      (buffer-string)))))
    (when (and draft (not (string-blank-p draft)))
      (setq amacs-shell--draft-saved draft amacs-shell--draft-pending draft)))
  (setq amacs-shell--draft-tick (buffer-chars-modified-tick))
  (add-hook 'kill-buffer-hook #'amacs-shell--save-draft nil t)
  (add-hook 'kill-emacs-hook #'amacs-shell--save-drafts)
  (unless amacs-shell--draft-timer
    (setq amacs-shell--draft-timer (run-at-time amacs-shell-draft-save-interval amacs-shell-draft-save-interval
                                                #'amacs-shell--save-drafts))))

(defun amacs-shell--put-at-prompt (text)
  "Put TEXT at the shell's empty prompt, point after it in every window."
  (let ((inhibit-read-only t))
    (delete-region (min (point-max) (+ amacs-shell--prompt-start (length amacs-shell-prompt)))
                   (point-max))
    (goto-char (point-max))
    (insert text)
    (dolist (window (get-buffer-window-list (current-buffer) nil t))
      (set-window-point window (point-max)))))

(defun amacs-shell--draft-rewound ()
  "Save the input at the prompt again, whatever the file held.
A rewind moved an unsent input saved after its tick onto the abandoned
ref; what is at the prompt now is the present, and is kept."
  (setq amacs-shell--draft-saved "" amacs-shell--draft-tick nil)
  (amacs-shell--save-draft))

(defun amacs-shell--restore-draft ()
  "Put the unsent input of last time back at the prompt, and say so in one line.
If something was typed at the prompt while the shell started, that
stays, and the input of last time goes to the kill ring instead."
  (let ((draft (amacs-shell--get 'amacs-shell--draft-pending))
        (buffer (amacs-shell--buffer)))
    (when draft
      (with-current-buffer buffer
        (setq amacs-shell--draft-pending nil amacs-shell--draft-tick nil) ; saved as it now stands
        (if (string-blank-p (amacs-shell--draft))
            (progn (amacs-shell--put-at-prompt draft)
                   (setq draft nil))
          (kill-new draft)))
      (amacs-shell--note
       (substitute-command-keys
        (if draft
            "Your input from last time, not sent, is in the kill ring (\\[yank]): you typed at the prompt meanwhile."
          "Restored at the prompt: your input from last time, not answered yet (\\<amacs-shell-mode-map>\\[amacs-shell-return] sends it)."))))))

;;;; Compose: a long prompt in a buffer of its own

(defvar amacs-compose-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'amacs-compose-send)
    (define-key map (kbd "C-c C-k") #'amacs-compose-cancel)
    map)
  "Keymap of `amacs-compose-mode'.")

(define-derived-mode amacs-compose-mode text-mode "AMACS-Compose"
  "Write a long prompt for the agent; \\[amacs-compose-send] sends it.

\\{amacs-compose-mode-map}")

(defun amacs-compose (&optional initial)
  "Compose a long prompt in a buffer of its own, starting with INITIAL."
  (interactive)
  (let ((connection (amacs-current-connection)))  ; the shell it sends through
    (pop-to-buffer (get-buffer-create "*amacs-compose*"))
    (unless (derived-mode-p 'amacs-compose-mode) (amacs-compose-mode))
    (setq amacs--buffer-connection connection))
  (when initial
    (erase-buffer)
    (insert initial))
  (setq header-line-format
        (substitute-command-keys "Prompt for the agent: \\<amacs-compose-mode-map>\\[amacs-compose-send] sends, \\[amacs-compose-cancel] cancels")))

(defun amacs-shell--send-text (text)
  "Send TEXT through the shell, as if typed at its prompt."
  (with-current-buffer (or (amacs-shell--buffer) (user-error "Open the shell first: M-x amacs-shell"))
    (goto-char (point-max))
    (comint-kill-input)
    (insert text)
    (comint-send-input)))

(defun amacs-compose-send ()
  "Send the composed prompt through the shell, as if typed there."
  (interactive)
  (let ((text (string-trim (buffer-substring-no-properties (point-min) (point-max))))
        (compose (current-buffer)))
    (when (string-empty-p text) (user-error "Nothing to send"))
    (amacs-shell--send-text text)
    (quit-window t (get-buffer-window compose))))

(defun amacs-compose-cancel ()
  "Throw the composed prompt away."
  (interactive)
  (quit-window t))

;;;; Context from your own Emacs

(defun amacs--src-language (mode)
  "The org source block language of major MODE, e.g. python for `python-mode'."
  (let ((name (string-remove-suffix "-mode" (symbol-name mode))))
    (cond ((string-suffix-p "-ts" name) (string-remove-suffix "-ts" name))
          ((equal name "lisp-interaction") "emacs-lisp")
          (t name))))

;;;###autoload (autoload 'amacs-send-region "amacs" "Send the region to the agent with a message." t)
(defun amacs-send-region (beg end message)
  "Send the text between BEG and END to the agent, quoted, with MESSAGE.
Code goes as an org source block in its buffer's language, prose as a
quote; both name where they came from."
  (interactive
   (if (use-region-p)
       (list (region-beginning) (region-end) (read-string "Message about the region: "))
     (user-error "Select a region first")))
  (let* ((text (string-trim-right (buffer-substring-no-properties beg end)))
         (where (format "%s, lines %d-%d" (or (and buffer-file-name (abbreviate-file-name buffer-file-name))
                                              (buffer-name))
                        (line-number-at-pos beg)
                        ;; A region that ends at the start of a line does not include that line.
                        (line-number-at-pos (if (and (> end beg) (save-excursion (goto-char end) (bolp)))
                                                (1- end)
                                              end))))
         (block (if (derived-mode-p 'prog-mode)
                    (format "#+begin_src %s\n%s\n#+end_src" (amacs--src-language major-mode) text)
                  (format "#+begin_quote\n%s\n#+end_quote" text))))
    (deactivate-mark)
    (amacs-shell--send-text (concat (string-trim message) (if (string-empty-p (string-trim message)) "" "\n\n")
                                    "From " where ":\n" block))
    (pop-to-buffer (amacs-shell--buffer))))

;;;###autoload (autoload 'amacs-add-buffer "amacs" "Add a buffer to the agent's active thread." t)
(defun amacs-add-buffer (&optional buffer)
  "Add BUFFER (default: the current one) to the agent's active thread.
The agent sees its contents from its next tick; a buffer
visiting a file is added by its file name."
  (interactive)
  (let* ((buffer (or buffer (current-buffer)))
         (name (with-current-buffer buffer
                 (if buffer-file-name (abbreviate-file-name buffer-file-name) (buffer-name)))))
    (when (eq buffer (amacs-shell--buffer)) (user-error "That is the shell itself"))
    (amacs-when-ready
     (lambda ()
       (amacs-call 'person_add_buffer (list name)
                   (lambda (answer)
                     (amacs-shell--note (format "Added %s to thread %s: the agent sees it from its next tick."
                                                name (plist-get answer :thread)))
                     (message "AMACS: added %s to thread %s" name (plist-get answer :thread)))
                   (lambda (err) (amacs-shell--note (concat "Could not add " name ": " err))))))))

(provide 'amacs-shell-input)
;;; amacs-shell-input.el ends here
