;;; amacs.el --- An LLM agent that acts in Elisp, and a research platform -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1") (epc "0.1.1") (magit-section "3.3.0"))
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; M-x amacs-shell opens `*amacs-shell*'.  A Python server owns the
;; agent's mind; Emacs shows its replies and evaluates the elisp it
;; returns.  See README.md and docs/install.md for set-up.
;;
;; Needs the packages epc (the transport) and magit-section (the hub):
;; on Debian `apt install elpa-epc elpa-magit-section', else
;; M-x package-install from MELPA / NonGNU ELPA.  This file is the
;; package's main file: only its headers count, and its Package-Requires
;; lists every package outside Emacs that any file of elisp/ requires.
;; Install the folder with package.el (`package-install-file' on a tar
;; of it, `package-vc-install' on Emacs 29+), whose autoloads define
;; the commands the documentation names, or put it on `load-path' and
;; (require 'amacs).

;;; Code:

(require 'amacs-server)
(require 'amacs-eval)
(require 'amacs-agent)
(require 'amacs-buffers)
(require 'amacs-shell)

;; The hub loads magit-section and org; it is loaded when first opened, so
;; a session that never opens it keeps a smaller heap (and shorter GCs).
(autoload 'amacs-hub "amacs-hub" "Open the AMACS hub." t)
(autoload 'amacs-open-chat-log "amacs-hub" "Open agent-chat.org in `org-mode'." t)
(autoload 'amacs-memory-search "amacs-hub" "Search the agent's long-term memory." t)
(autoload 'amacs-memory-show "amacs-hub" "Show an item of the agent's memory." t)
(autoload 'amacs-report "amacs-research" "Write and open the report of an experiment's runs." t)
(autoload 'amacs-rewind "amacs-history" "Return the agent's mind to just before a past input." t)
(autoload 'amacs-fork "amacs-history" "Make a new AMACS home holding the mind at a past input." t)
(autoload 'amacs-use-local-model "amacs-local" "Switch the agent to a small model on this machine." t)
(autoload 'amacs-demo "amacs-local" "Switch the agent to the scripted demo model." t)

(defun amacs--restarted (own)
  "Say in one line that the server is back, from its status (`amacs-status').
OWN is non-nil when this Emacs started the server it is connected to.
The server's notice (a missing key, the local model's note) is said
here only without a shell: the shell says it when it greets the server."
  (let ((model (or (amacs-status :model) "an unknown model"))
        (backend (or (amacs-status :backend) "an unknown backend"))
        (notice (amacs-status :notice))
        (url (amacs-chosen :base-url)))
    (when url (setq backend (format "%s at %s" backend url)))
    ;; The server talks to the demo model as to Claude, so its backend is "anthropic":
    ;; named so, a newcomer read that they talked to Anthropic.
    (when (equal (amacs-status :endpoint) "demo")
      (setq model "the scripted demo model" backend "this machine (no key, nothing paid)"))
    (message nil)                       ; "restarting the server…" is done
    (amacs--say "%s"
                (concat (if own
                            (format "AMACS server restarted: %s on %s." model backend)
                          (format "Reconnected to the headless AMACS server (restart it where it runs): %s on %s."
                                  model backend))
                        (if (and notice (not (amacs-shell--buffer))) (concat " " notice) "")))))

(defun amacs--start-failed-in-shell ()
  "The server could not start: say in the shell that what waited was not sent.
Each input that waited for the server moves into the conversation,
marked not sent; \\[comint-previous-input] brings it back."
  (amacs-shell--drop-queued "the AMACS server could not start" 'waiting)
  (amacs-shell--transition 'failed)
  (amacs-shell--restore-draft))

(add-hook 'amacs-start-failed-hook #'amacs--start-failed-in-shell)

;;;###autoload
(defun amacs-restart (&optional confirm)
  "Restart the AMACS server; the shell stays.
A tick in progress gets two seconds to finish; your input is on disk anyway.
Says in one line which model the new server uses, and what it still lacks.
With CONFIRM (interactively), ask first while the agent works on a turn."
  (interactive (list t))
  (when (and confirm (not (amacs-shell--go-on-p "restart" "your input is saved")))
    (user-error "Not restarted"))
  (message "AMACS: restarting the server…") ; said at once: `amacs-shell--said-at-once'
  (let ((amacs-stop-grace (min amacs-stop-grace 2)))
    (amacs-stop-server))
  (amacs-reset-start-attempts)
  (amacs-when-ready (lambda () (amacs--restarted (process-live-p (amacs-server-process))))))

(provide 'amacs)
;;; amacs.el ends here
