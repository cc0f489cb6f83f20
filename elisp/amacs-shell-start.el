;;; amacs-shell-start.el --- M-x amacs-shell: the server first, then the shell -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The commands that open a shell, autoloaded from this small file so
;; that `M-x amacs-shell' starts the server process before the shell's
;; own files are loaded: Python's start-up (~0.3 s) then runs while
;; Emacs loads them and makes the buffer.  Loading those files first
;; delayed the process by their load and by the garbage collection it
;; set off (26-45 ms of the 46-78 ms before the process started).

;;; Code:

(require 'amacs-server)
(declare-function amacs-shell--open "amacs-shell" (connection))

(defconst amacs-shell--start-gc-threshold (* 64 1024 1024)
  "The `gc-cons-threshold' from a shell's start until its first reply.
Garbage collection waits until the process runs, the shell with its
prompt is on screen, and a question asked at once is answered: what
the person waits on.  Given back at Emacs's first idle moment, it
collected (30-45 ms, load 5) between the prompt's first draw and the
keys typed at it, the question's RET and the hello waiting for it.")

(defconst amacs-shell--start-gc-idle 3
  "Seconds idle after which a shell's start gives garbage collection back.
For a person who does not ask at once: the collection then runs while
Emacs waits for keys.")

(defvar amacs-shell--gc-to-give-back nil
  "The `gc-cons-threshold' a shell's start gives back; nil when none is held.")

(defun amacs-shell--hold-gc (&optional threshold)
  "Hold garbage collection until the first reply is on screen; then set THRESHOLD.
THRESHOLD defaults to `gc-cons-threshold' now.  Given back once a turn
is done, its reply drawn, or after `amacs-shell--start-gc-idle' seconds
idle, whichever comes first.  Held already, nothing changes."
  (unless amacs-shell--gc-to-give-back
    (setq amacs-shell--gc-to-give-back (or threshold gc-cons-threshold)
          gc-cons-threshold (max gc-cons-threshold amacs-shell--start-gc-threshold))
    (amacs-on-event "turn-done" #'amacs-shell--give-gc-back-after-redisplay)
    (run-with-idle-timer amacs-shell--start-gc-idle nil #'amacs-shell--give-gc-back)))

(defun amacs-shell--give-gc-back-after-redisplay (_event)
  "Give garbage collection back once what the turn put on screen is drawn."
  (when amacs-shell--gc-to-give-back
    (run-at-time 0 nil #'amacs-shell--give-gc-back)))

(defun amacs-shell--give-gc-back ()
  "Set `gc-cons-threshold' back to what a shell's start held it from."
  (when amacs-shell--gc-to-give-back
    (setq gc-cons-threshold amacs-shell--gc-to-give-back
          amacs-shell--gc-to-give-back nil)))

(defvar amacs-shell--starting-said nil
  "What the echo area was given to say while a server starts, or nil.")

(defun amacs-shell--say-starting (connection)
  "Say in the echo area that CONNECTION's server is starting, when it is.
Said by a command run with \[execute-extended-command]: an empty echo
area after the command makes it look at once for a shorter way to type
the command's name (`extended-command-suggest-shorter', ~0.2 s of Lisp),
and the server's port line waited for that; with something said, it
looks 2 s later, when the server is ready.  Cleared once it is."
  (when (and (not (amacs-live-p connection))
             (or (process-live-p (amacs-life-process (amacs-connection-life connection)))
                 (amacs--connecting-p connection)))
    (setq amacs-shell--starting-said (message "Starting the AMACS server..."))))

(defun amacs-shell--starting-done ()
  "Clear the echo area of the starting notice, if it is still there."
  (when (and amacs-shell--starting-said (equal (current-message) amacs-shell--starting-said))
    (message nil))
  (setq amacs-shell--starting-said nil))

(add-hook 'amacs-ready-hook #'amacs-shell--starting-done)

(defun amacs-shell--start (connection &optional interactive)
  "Start CONNECTION's server, then load the shell and open it; return its buffer.
INTERACTIVE: a person ran the command; the echo area says a server starts."
  (amacs-shell--hold-gc)
  (amacs-start-server connection)       ; nothing when a server is live or starting
  (require 'amacs-shell)
  (prog1 (amacs-shell--open connection)
    (when interactive (amacs-shell--say-starting connection))))

;;;###autoload
(defun amacs-shell ()
  "Open the AMACS shell and start its server if needed.
The shell of the current connection (`amacs-current-connection'):
called from a shell or hub, that one's home; elsewhere the home
`amacs-home' names.  `amacs-shell-open' opens one on any home."
  (interactive)
  (amacs-shell--start (amacs-current-connection) (called-interactively-p 'any)))

;;;###autoload
(defun amacs-shell-open (home)
  "Open a shell on the AMACS home HOME, starting its server if needed.
Return the shell buffer.  Each home has its own connection, server and
shell: one Emacs can talk to several homes at once.  Its shell buffer
is `amacs-shell-buffer-name' for the home `amacs-home' names, else
named for HOME."
  (interactive "DAMACS home: ")
  (amacs-shell--start (amacs-connection-for home) (called-interactively-p 'any)))

(provide 'amacs-shell-start)
;;; amacs-shell-start.el ends here
