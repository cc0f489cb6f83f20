;;; amacs-shell.el --- The *amacs-shell* comint buffer -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1") (epc "0.1.1"))
;; Keywords: tools, ai
;; URL: https://example.invalid/amacs

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The person's window onto the agent (RFC v4 §2.1, §9.1): a comint
;; buffer with a dummy process, as in ielm.  RET hands the input to the
;; server and returns at once; the agent's reply appears when it comes.
;; Only the reply is shown; mood, confidence and eval stay internal.

;;; Code:

(require 'comint)
(require 'amacs-transport)
(require 'amacs-eval)

(declare-function amacs-hub "amacs-hub")
(declare-function amacs-open-chat-log "amacs-hub")

(defcustom amacs-shell-prompt "amacs> "
  "Prompt of the AMACS shell."
  :type 'string
  :group 'amacs)

(defcustom amacs-shell-buffer-name "*amacs-shell*"
  "Name of the AMACS shell buffer."
  :type 'string
  :group 'amacs)

(defcustom amacs-shell-resume-exchanges 3
  "Exchanges from the chat log shown when a new shell opens (0: none)."
  :type 'integer
  :group 'amacs)

(defface amacs-shell-resumed '((t :inherit shadow))
  "Face of the earlier exchanges a new shell shows."
  :group 'amacs)

(defcustom amacs-shell-history-size 1000
  "Inputs kept in the shell's history, which persists across sessions."
  :type 'integer
  :group 'amacs)

(defface amacs-shell-annotation '((t :inherit font-lock-comment-face))
  "Face of informational notes in the AMACS shell."
  :group 'amacs)

(defface amacs-shell-warning '((t :inherit warning))
  "Face of warnings in the AMACS shell."
  :group 'amacs)

(defface amacs-shell-error '((t :inherit error))
  "Face of errors in the AMACS shell."
  :group 'amacs)

(defface amacs-shell-abandoned '((t :inherit shadow :strike-through t))
  "Face of streamed text that did not become the reply (invalid JSON, a retry)."
  :group 'amacs)

(defface amacs-shell-status '((t :inherit font-lock-comment-face :slant italic))
  "Face of one-line status notes, such as API retries."
  :group 'amacs)

(defvar amacs-shell-busy nil
  "Non-nil while the agent works on a turn.")

(defvar amacs-shell--stream-start nil
  "Marker where the reply being streamed starts, or nil.")

(defun amacs-shell--buffer ()
  "Return the live shell buffer, or nil."
  (get-buffer amacs-shell-buffer-name))

(defun amacs-shell--process ()
  "Return the dummy process of the shell buffer, or nil."
  (let ((buf (amacs-shell--buffer)))
    (and buf (get-buffer-process buf))))

(defun amacs-shell--prompt-start (proc)
  "Return the start of the idle prompt before PROC's mark, or nil."
  (let* ((pmark (marker-position (process-mark proc)))
         (start (- pmark (length amacs-shell-prompt))))
    (and (not amacs-shell-busy)
         (>= start (point-min))
         (string= (buffer-substring-no-properties start pmark) amacs-shell-prompt)
         start)))

(defun amacs-shell--insert (text &optional face)
  "Insert TEXT (in FACE) into the shell, above the prompt when it is idle.
Whatever the person has typed after the prompt stays where it is."
  (let ((proc (amacs-shell--process)))
    (when proc
      (with-current-buffer (process-buffer proc)
        (let* ((text (if (string-suffix-p "\n" text) text (concat text "\n")))
               (text (if face (propertize text 'font-lock-face face) text))
               (prompt-start (amacs-shell--prompt-start proc)))
          (if (not prompt-start)
              (comint-output-filter proc text)
            (let ((inhibit-read-only t))
              (delete-region prompt-start (process-mark proc)))
            (set-marker (process-mark proc) prompt-start)
            (comint-output-filter proc text)
            (comint-output-filter proc amacs-shell-prompt)))))))

(defun amacs-shell--prompt ()
  "Show the prompt again."
  (let ((proc (amacs-shell--process)))
    (when proc
      (with-current-buffer (process-buffer proc)
        (comint-output-filter proc amacs-shell-prompt)))))

(defun amacs-shell--note (text)
  "Show TEXT as a note in the shell, or in the echo area without a shell."
  (if (amacs-shell--process)
      (amacs-shell--insert (concat ";; " text) 'amacs-shell-annotation)
    (message "%s" text)))

(defun amacs-shell--on-reply (event)
  "Show the reply in EVENT, set off by blank lines as in RFC v4 §9.1.
When the reply was streamed, check the streamed text and finish it."
  (let ((text (string-trim (plist-get event :text)))
        (proc (amacs-shell--process)))
    (if (and (plist-get event :streamed) amacs-shell--stream-start proc)
        (with-current-buffer (process-buffer proc)
          (let ((shown (buffer-substring-no-properties amacs-shell--stream-start (process-mark proc))))
            (unless (equal (string-trim shown) text) ; the stream missed something: show the reply
              (let ((inhibit-read-only t))
                (delete-region amacs-shell--stream-start (process-mark proc)))
              (comint-output-filter proc text)))
          (comint-output-filter proc "\n\n")
          (setq amacs-shell--stream-start nil))
      (amacs-shell--insert (concat "\n" text "\n\n")))))

(defun amacs-shell--append-output (proc text)
  "Insert TEXT as output at PROC's mark, before anything typed after it.
Cheaper than `comint-output-filter', which re-processes the whole
current line: a streaming reply makes that line longer with each delta."
  (with-current-buffer (process-buffer proc)
    (let ((inhibit-read-only t)
          (pmark (process-mark proc)))
      (save-excursion
        (goto-char pmark)
        ;; Plain `insert': markers at this spot (where the stream started) stay put.
        (insert (propertize text 'field 'output 'inhibit-line-move-field-capture t
                            'front-sticky '(field inhibit-line-move-field-capture) 'rear-nonsticky t))
        (set-marker pmark (point)))
      (dolist (window (get-buffer-window-list (current-buffer) nil t))
        (when (>= (window-point window) pmark)
          (set-window-point window (point-max)))))))

(defun amacs-shell--on-reply-delta (event)
  "Show the next piece of the reply in EVENT as it streams."
  (let ((proc (amacs-shell--process)))
    (when proc
      (with-current-buffer (process-buffer proc)
        (unless amacs-shell--stream-start
          (comint-output-filter proc "\n")
          (setq amacs-shell--stream-start (copy-marker (process-mark proc))))
        (amacs-shell--append-output proc (plist-get event :text))))))

(defun amacs-shell--on-reply-abandon (event)
  "Mark the streamed text as not the reply, for the reason in EVENT."
  (let ((proc (amacs-shell--process)))
    (when (and proc amacs-shell--stream-start)
      (with-current-buffer (process-buffer proc)
        (let ((inhibit-read-only t))
          (add-text-properties amacs-shell--stream-start (process-mark proc)
                               '(font-lock-face amacs-shell-abandoned face amacs-shell-abandoned)))
        (setq amacs-shell--stream-start nil)
        (comint-output-filter proc "\n")
        (amacs-shell--insert (format ";; (the text above was discarded: %s)" (plist-get event :reason))
                             'amacs-shell-annotation)))))

(defun amacs-shell--on-annotation (event)
  "Show the one-line note in EVENT in its kind's face."
  (amacs-shell--insert
   (concat ";; " (plist-get event :text))
   (pcase (plist-get event :kind)
     ("warning" 'amacs-shell-warning)
     ("error" 'amacs-shell-error)
     ("status" 'amacs-shell-status)
     (_ 'amacs-shell-annotation))))

(defun amacs-shell--on-turn-done (_event)
  "The agent waits for the person: give the prompt back."
  (setq amacs-shell-busy nil)
  (amacs-shell--prompt))

(amacs-on-event "reply" #'amacs-shell--on-reply)
(amacs-on-event "reply-delta" #'amacs-shell--on-reply-delta)
(amacs-on-event "reply-abandon" #'amacs-shell--on-reply-abandon)
(amacs-on-event "annotation" #'amacs-shell--on-annotation)
(amacs-on-event "turn-done" #'amacs-shell--on-turn-done)
(amacs-on-event "turn-start" (lambda (_event) (setq amacs-shell-busy t)))

(defvar-local amacs-shell--resumed nil
  "Non-nil once this shell has shown the earlier exchanges.")

(defun amacs-shell--resume ()
  "Show the last exchanges of agent-chat.org above the prompt of a new shell."
  (let ((buffer (amacs-shell--buffer))
        (recent (last (plist-get amacs--status :recent) (max 0 amacs-shell-resume-exchanges))))
    (when (and buffer (not (buffer-local-value 'amacs-shell--resumed buffer)))
      (with-current-buffer buffer
        (setq amacs-shell--resumed t))     ; once per shell, even when there is nothing to show
      (when recent
       (with-current-buffer buffer
        (amacs-shell--insert
         (propertize
          (concat (mapconcat
                   (lambda (entry)
                     (concat (if (plist-get entry :human)
                                 (format "%s%s\n" amacs-shell-prompt (plist-get entry :human))
                               "")
                             (if (plist-get entry :agent)
                                 (format "\n%s\n" (string-trim (plist-get entry :agent)))
                               "")))
                   recent "\n")
                  "\n")
          'font-lock-face 'amacs-shell-resumed))
        (amacs-shell--insert
         (substitute-command-keys
          ";; Resumed: the last exchanges from agent-chat.org (\\<amacs-shell-mode-map>\\[amacs-open-chat-log] opens it all).")
         'amacs-shell-annotation))))))

(defun amacs-shell--greet ()
  "Say what the server reported at hello: a missing key, an interrupted turn."
  (amacs-shell--resume)
  (let ((notice (plist-get amacs--status :notice)))
    (when notice (amacs-shell--insert (concat ";; " notice) 'amacs-shell-warning)))
  (when (plist-get amacs--status :interrupted)
    (amacs-shell--insert
     ";; Your last message got no reply before the server stopped; it is kept in agent-chat.org. Send again to continue."
     'amacs-shell-warning)))

(defvar amacs-shell-usage nil
  "The last tick's usage event: the tick's and the session's tokens and cost.")

(defun amacs-shell--k (n)
  "N tokens, short: 950, 12.3k, 1.2M."
  (cond ((< n 1000) (format "%d" n))
        ((< n 1000000) (format "%.1fk" (/ n 1000.0)))
        (t (format "%.1fM" (/ n 1000000.0)))))

(defun amacs-shell-cost-string ()
  "The cost shown in the shell's mode line, from the last tick's usage."
  (let* ((session (plist-get amacs-shell-usage :session))
         (tick (plist-get amacs-shell-usage :this-tick)))
    (if (not session)
        ""
      (format " [$%.4f session, $%.4f tick of $%.2f | in %s out %s cache r %s w %s]"
              (plist-get session :cost) (plist-get tick :cost) (plist-get amacs-shell-usage :budget-limit)
              (amacs-shell--k (plist-get session :input-tokens))
              (amacs-shell--k (plist-get session :output-tokens))
              (amacs-shell--k (plist-get session :cache-read-tokens))
              (amacs-shell--k (plist-get session :cache-write-tokens))))))

(defun amacs-shell--on-tick (event)
  "Keep the tick's usage from EVENT and show it in the mode line."
  (setq amacs-shell-usage event)
  (let ((buffer (amacs-shell--buffer)))
    (when buffer
      (with-current-buffer buffer
        (setq mode-line-process (amacs-shell-cost-string))
        (force-mode-line-update)))))

(amacs-on-event "tick" #'amacs-shell--on-tick)

(defun amacs-set-budget (dollars)
  "Set the agent's budget limit to DOLLARS.
An agent stopped at its limit goes on with your next input."
  (interactive (list (read-number "Budget limit in dollars: "
                                  (* 2 (or (plist-get amacs-shell-usage :budget-limit) 5.0)))))
  (amacs-when-ready
   (lambda () (amacs-call 'set_budget (list dollars)
                          (lambda (limit) (message "AMACS: budget limit is now $%.2f" limit))))))

(defun amacs-set-model (backend model &optional base-url)
  "Switch the agent to MODEL on BACKEND from its next model call.
BACKEND is \"anthropic\" or \"openai\" (any OpenAI-compatible server);
BASE-URL points at such a server, e.g. Ollama or llama.cpp."
  (interactive
   (let ((backend (completing-read "Backend: " '("anthropic" "openai") nil t nil nil
                                   (or (plist-get amacs--status :backend) "anthropic"))))
     (list backend
           (read-string "Model: " (plist-get amacs--status :model))
           (let ((url (read-string "Base URL (empty: the default): "
                                   (and (equal backend "openai") "http://localhost:11434/v1"))))
             (unless (string-empty-p url) url)))))
  (amacs-when-ready
   (lambda ()
     (amacs-call 'set_model (list backend model base-url)
                 (lambda (now)
                   (setq amacs--status (plist-put amacs--status :model (plist-get now :model)))
                   (setq amacs--status (plist-put amacs--status :backend (plist-get now :backend)))
                   (amacs-shell--note (format "Now using %s on %s." (plist-get now :model)
                                              (plist-get now :backend))))))))

(defun amacs-shell--on-disconnect ()
  "The server went away mid-turn: give the prompt back."
  (when amacs-shell-busy
    (setq amacs-shell-busy nil)
    (amacs-shell--prompt)))

(add-hook 'amacs-ready-hook #'amacs-shell--greet)
(add-hook 'amacs-disconnect-hook #'amacs-shell--on-disconnect)

(defun amacs-shell--save-history-everywhere ()
  "Save the history of the shell buffer, if there is one."
  (let ((buffer (amacs-shell--buffer)))
    (when buffer (with-current-buffer buffer (amacs-shell--save-history)))))

(defun amacs-shell--input-sender (_proc input)
  "Send INPUT to the agent; return at once.  The history is saved each time."
  (amacs-shell--save-history)
  (let ((text (string-trim (substring-no-properties input))))
    (if (string-empty-p text)
        (amacs-shell--prompt)
      (setq amacs-shell-busy t)
      (amacs-when-ready
       (lambda ()
         (amacs-call 'submit (list text) nil
                     (lambda (err)
                       (setq amacs-shell-busy nil)
                       (amacs-shell--insert (concat ";; Not sent: " err) 'amacs-shell-error)
                       (amacs-shell--prompt))))))))

(defun amacs-shell-interrupt ()
  "Stop the agent's turn: its model call and the evaluations it chains.
Your input stays in the chat log; the tick is recorded as interrupted."
  (interactive)
  (if (not (amacs-live-p))
      (message "AMACS: no server to interrupt")
    (amacs-call 'interrupt nil
                (lambda (running)
                  (unless running (message "AMACS: the agent is not working on anything"))))))

(defun amacs-shell-newline ()
  "Insert a newline in the input; RET sends it."
  (interactive)
  (insert "\n"))

(defun amacs-shell--history-file ()
  "Return the file of the shell's input history."
  (expand-file-name "shell-history" (or amacs-home (getenv "AMACS_HOME") "~/.agent")))

(defun amacs-shell--save-history ()
  "Write the input history to its file."
  (when (derived-mode-p 'amacs-shell-mode)
    (make-directory (file-name-directory comint-input-ring-file-name) t)
    (comint-write-input-ring)))

(defvar amacs-compose-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'amacs-compose-send)
    (define-key map (kbd "C-c C-k") #'amacs-compose-cancel)
    map)
  "Keymap of `amacs-compose-mode'.")

(define-derived-mode amacs-compose-mode text-mode "AMACS-Compose"
  "Write a long prompt for the agent; \[amacs-compose-send] sends it.

\{amacs-compose-mode-map}")

(defun amacs-compose ()
  "Compose a long prompt in a buffer of its own."
  (interactive)
  (pop-to-buffer (get-buffer-create "*amacs-compose*"))
  (unless (derived-mode-p 'amacs-compose-mode) (amacs-compose-mode))
  (setq header-line-format
        (substitute-command-keys "Prompt for the agent: \\<amacs-compose-mode-map>\\[amacs-compose-send] sends, \\[amacs-compose-cancel] cancels")))

(defun amacs-compose-send ()
  "Send the composed prompt through the shell, as if typed there."
  (interactive)
  (let ((text (string-trim (buffer-substring-no-properties (point-min) (point-max))))
        (compose (current-buffer)))
    (when (string-empty-p text) (user-error "Nothing to send"))
    (with-current-buffer (or (amacs-shell--buffer) (user-error "Open the shell first: M-x amacs-shell"))
      (goto-char (point-max))
      (comint-kill-input)
      (insert text)
      (comint-send-input))
    (quit-window t (get-buffer-window compose))))

(defun amacs-compose-cancel ()
  "Throw the composed prompt away."
  (interactive)
  (quit-window t))

(defvar amacs-shell-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'comint-send-input)
    ;; As in ielm: C-j sends too.  Enter typed ahead while Emacs starts reaches
    ;; it through the terminal's cooked mode as C-j, and must not be lost.
    (define-key map (kbd "C-j") #'comint-send-input)
    (define-key map (kbd "S-<return>") #'amacs-shell-newline)
    (define-key map (kbd "C-c C-e") #'amacs-compose)
    (define-key map (kbd "C-c C-c") #'amacs-shell-interrupt)
    (define-key map (kbd "C-c C-h") #'amacs-hub)
    (define-key map (kbd "C-c C-l") #'amacs-open-chat-log)
    map)
  "Keymap of `amacs-shell-mode'.")

(define-derived-mode amacs-shell-mode comint-mode "AMACS"
  "Major mode of the AMACS shell: type to the agent, RET sends.
\\[amacs-hub] opens the hub, \\[amacs-open-chat-log] the chat log.

\\{amacs-shell-mode-map}"
  (setq comint-prompt-regexp (concat "^" (regexp-quote amacs-shell-prompt)))
  (setq-local paragraph-separate "\\'")
  (setq-local paragraph-start comint-prompt-regexp)
  (setq-local comint-input-sender #'amacs-shell--input-sender)
  (setq-local comint-process-echoes nil)
  (setq-local comint-prompt-read-only t)
  (setq-local comint-use-prompt-regexp nil)
  (setq-local comint-input-ring-file-name (amacs-shell--history-file))
  (setq-local comint-input-ring-size amacs-shell-history-size)
  (setq-local comint-input-ignoredups t)
  (comint-read-input-ring t)
  (add-hook 'kill-buffer-hook #'amacs-shell--save-history nil t)
  (add-hook 'kill-emacs-hook #'amacs-shell--save-history-everywhere)
  (unless (comint-check-proc (current-buffer))
    (let ((proc (condition-case nil
                    (start-process "amacs-shell" (current-buffer) "hexl")
                  (file-error (start-process "amacs-shell" (current-buffer) "cat")))))
      (set-process-query-on-exit-flag proc nil)
      (goto-char (point-max))
      (set-marker (process-mark proc) (point))
      (comint-output-filter proc amacs-shell-prompt))))

;;;###autoload
(defun amacs-shell ()
  "Open `*amacs-shell*' and start the AMACS server if needed."
  (interactive)
  (let ((buf (get-buffer-create amacs-shell-buffer-name)))
    (with-current-buffer buf
      (unless (derived-mode-p 'amacs-shell-mode) (amacs-shell-mode)))
    (setq amacs-transport-message-function #'amacs-shell--note)
    (pop-to-buffer-same-window buf)
    (amacs-when-ready #'ignore)
    buf))

(provide 'amacs-shell)
;;; amacs-shell.el ends here
