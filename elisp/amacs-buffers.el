;;; amacs-buffers.el --- The active thread's buffers, read for the agent -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Buffer hydration (ARCHITECTURE.md, The context and the cache): before each tick the server
;; asks for the buffers of the active thread, by buffer name or file
;; path.  A live buffer is read as it is; a file is visited if it is not
;; too large.  A buffer that is gone, or a file too large, is reported
;; in its entry instead of failing the tick.

;;; Code:

(require 'amacs-transport)

(defcustom amacs-buffer-max-chars 20000
  "Most characters of one buffer shown to the agent; the rest is cut."
  :type 'integer
  :group 'amacs)

(defcustom amacs-buffer-max-file-bytes 1000000
  "Largest file, in bytes, visited to show its contents to the agent."
  :type 'integer
  :group 'amacs)

(defun amacs--buffer-entry (name buffer)
  "Return the entry for NAME read from BUFFER: its mode and contents."
  (with-current-buffer buffer
    (let* ((size (buffer-size))
           (end (min (point-max) (+ (point-min) amacs-buffer-max-chars))))
      (list :name name
            :mode (symbol-name major-mode)
            :file (and buffer-file-name (abbreviate-file-name buffer-file-name))
            :size size
            :truncated (if (> size amacs-buffer-max-chars) t nil)
            :content (save-restriction
                       (widen)
                       (buffer-substring-no-properties (point-min) end))))))

(defun amacs--hydrate-one (name)
  "Return the entry for NAME, a buffer name or a file path."
  (let* ((buffer (get-buffer name))
         (dir (let ((shell (get-buffer "*amacs-shell*")))
                (if shell (buffer-local-value 'default-directory shell) default-directory)))
         (file (expand-file-name name dir)))
    (condition-case err
        (cond
         ((buffer-live-p buffer) (amacs--buffer-entry name buffer))
         ((file-directory-p file) (list :name name :error "is a directory, not a file"))
         ((file-exists-p file)
          (let ((size (file-attribute-size (file-attributes file))))
            (if (> size amacs-buffer-max-file-bytes)
                (list :name name :error (format "file too large: %d bytes (amacs-buffer-max-file-bytes is %d)"
                                                size amacs-buffer-max-file-bytes))
              (amacs--buffer-entry name (find-file-noselect file)))))
         (t (list :name name :error "no such buffer or file (it may have been killed)")))
      (error (list :name name :error (error-message-string err))))))

(defun amacs--handle-hydrate-event (event)
  "Read the buffers EVENT names and send their entries to the server."
  (let ((entries (mapcar #'amacs--hydrate-one (plist-get event :buffers))))
    (when (amacs-live-p)
      (amacs-call 'emacs_reply (list (plist-get event :id) (list :buffers entries))))))

(amacs-on-event "hydrate" #'amacs--handle-hydrate-event)

(provide 'amacs-buffers)
;;; amacs-buffers.el ends here
