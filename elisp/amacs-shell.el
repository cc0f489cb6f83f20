;;; amacs-shell.el --- The *amacs-shell* comint buffer -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The person's window onto the agent (ARCHITECTURE.md, The transport): a comint
;; buffer with a dummy process, as in ielm.  RET hands the input to the
;; server and returns at once; the agent's reply appears when it comes.
;;
;; The shell is in six files, along its seams:
;;
;;   amacs-shell-start.el   `amacs-shell' and `amacs-shell-open': the server
;;                          starts before the other files load
;;   amacs-shell-output.el  the buffer's layout (output, footer, prompt) and
;;                          every write to it
;;   amacs-shell-header.el  the turn's state (`amacs-shell-turn', changed only by
;;                          `amacs-shell--transition'), header line, mode line
;;   amacs-shell-stream.el  what the agent produces: the streamed reply, its
;;                          thinking, eval and tool lines
;;   amacs-shell-input.el   the input history, the compose buffer, regions and
;;                          buffers sent from the person's Emacs
;;   amacs-shell.el         this file: the server's events and hooks, the
;;                          commands, the mode and `amacs-shell'

;;; Code:

(require 'cl-lib)
;; comint is loaded when the shell's mode first runs (`comint-mode' is not
;; autoloaded): `amacs-shell' starts the server before, so that Python's
;; start-up and this load (~40 ms) go on at once.
(eval-when-compile (require 'comint))
(autoload 'comint-mode "comint")
(require 'amacs-server)
(require 'amacs-shell-start)             ; the commands that open a shell
(require 'amacs-eval)
(require 'amacs-render)
(require 'amacs-shell-output)
(require 'amacs-shell-header)
(require 'amacs-shell-stream)
(require 'amacs-shell-input)
(require 'amacs-changes)                ; the turn's ▸ changed line

(declare-function amacs-hub "amacs-hub")
(declare-function amacs-open-chat-log "amacs-hub")
(defvar shell-dirtrackp)

;;;; Settings

(defcustom amacs-shell-resume-exchanges 3
  "Exchanges from the chat log shown when a new shell opens (0: none)."
  :type 'integer
  :group 'amacs)

;;;; Events of a turn

(defvar-local amacs-shell--stop-said nil
  "Non-nil once the shell said what a server that stopped mid-turn kept.
The next server's hello need not say it again.")

(add-hook 'amacs-tool-call-functions #'amacs-shell--tool-line)

(defun amacs-shell--on-agents (event)
  "The server reports the subagents at work in EVENT: one footer line each.
One that was at work and is no longer has answered what it was asked.
EVENT also has what was spent so far: the mode line shows it at once,
since subagents spend between ticks."
  (when (plist-get event :session)
    (amacs-shell--on-spending event))
  (let* ((before (mapcar (lambda (a) (plist-get a :id)) (amacs-shell--get 'amacs-shell--agents)))
         (now (append (plist-get event :agents) nil))
         (ids (mapcar (lambda (a) (plist-get a :id)) now)))
    (amacs-shell--set 'amacs-shell--agents now)
    (dolist (id before)
      (unless (member id ids) (amacs-shell--transition 'answered id))))
  (amacs-shell--draw-agents))

(defun amacs-shell--on-input-taken (event)
  "The agent took the oldest input sent: it becomes part of the conversation.
A primary waiting for your reply has it.  EVENT says whether it is saved
in agent-chat.org (`:saved')."
  (amacs-shell--transition 'answered "you")
  (let ((line (amacs-shell--take-queued)))
    (when line
      (amacs-shell--transition 'taken (cons line (plist-get event :saved)))
      (let ((buffer (amacs-shell--buffer)))    ; taken, it is no longer kept to come back
        (when (buffer-live-p buffer)
          (with-current-buffer buffer (amacs-shell--save-draft)))))))

(defun amacs-shell--on-annotation (event)
  "Show the one-line note in EVENT in its kind's face.
A note is for the person: the shell decides nothing from its words.
What the shell acts on comes as an event with fields of its own."
  (let ((text (plist-get event :text))
        (kind (plist-get event :kind)))
    (amacs-shell--output
     (if (equal kind "agent")
         (amacs-shell--one-line text (* 2 (amacs-shell--width)))
       (concat ";; " text))
     (pcase kind
       ("agent" 'amacs-shell-agent)
       ("warning" 'amacs-shell-warning)
       ("error" 'amacs-shell-error)
       ("status" 'amacs-shell-status)
       (_ 'amacs-shell-annotation)))))

(defun amacs-shell--on-retry (event)
  "The model call is retried in EVENT's :seconds: the header counts them down."
  (let ((seconds (plist-get event :seconds)))
    (amacs-shell--transition 'retry (and (numberp seconds) (>= seconds 0.05) seconds))
    (amacs-shell--output (concat ";; " (plist-get event :text)) 'amacs-shell-status)))

(defun amacs-shell--on-preparing (event)
  "The model call waits on EVENT's :text (words for the header; empty: no longer)."
  (let ((text (plist-get event :text)))
    (amacs-shell--transition 'preparing (and (stringp text) (> (length text) 0) text))))

(defun amacs-shell--on-agent-ended (event)
  "Subagent :id of EVENT ended: ✓ when it answered (:ok), ✗ when not.
The primary waiting for it has its result."
  (amacs-shell--transition 'answered (plist-get event :id))
  (amacs-shell--task-ended event))

(defun amacs-shell--task-ended (ended)
  "Show the line of a subagent task that ENDED: its :text after ✓ when :ok, else ✗.
The live event and a resumed exchange's task are drawn by this one function."
  (amacs-shell--output
   (amacs-shell--one-line (concat (if (plist-get ended :ok) "✓ " "✗ ") (plist-get ended :text))
                          (* 2 (amacs-shell--width)))
   (if (plist-get ended :ok) 'amacs-shell-agent 'amacs-shell-warning)))

(defun amacs-shell--on-turn-start (_event)
  "The agent started a turn."
  (amacs-shell--transition 'turn-start))

(defun amacs-shell--on-turn-done (_event)
  "The agent waits for the person: a stream left open is discarded."
  (amacs-shell--discard-stream "the turn ended before the reply was complete")
  (amacs-shell--editing (amacs-shell--fresh-line t))
  (amacs-shell--transition 'turn-done))

(amacs-on-event "reply" #'amacs-shell--on-reply)

(amacs-on-event "reply-delta" #'amacs-shell--on-reply-delta)

(amacs-on-event "thinking-delta" #'amacs-shell--on-thinking-delta)

(amacs-on-event "reply-abandon" #'amacs-shell--on-reply-abandon)

(amacs-on-event "annotation" #'amacs-shell--on-annotation)

(amacs-on-event "retry" #'amacs-shell--on-retry)

(amacs-on-event "preparing" #'amacs-shell--on-preparing)

(amacs-on-event "agent-ended" #'amacs-shell--on-agent-ended)

(amacs-on-event "turn-done" #'amacs-shell--on-turn-done)

(amacs-on-event "turn-start" #'amacs-shell--on-turn-start)

(defun amacs-shell--on-step (event)
  "Show which tick of the turn began, and of how many at most, from EVENT."
  (amacs-shell--transition 'step (cons (plist-get event :step) (plist-get event :limit))))

(amacs-on-event "step" #'amacs-shell--on-step)

(amacs-on-event "input-taken" #'amacs-shell--on-input-taken)

(amacs-on-event "agents" #'amacs-shell--on-agents)

(amacs-on-event "tick" #'amacs-shell--on-tick)

(add-hook 'amacs-eval-start-functions #'amacs-shell--eval-start)

(add-hook 'amacs-eval-done-functions #'amacs-shell--eval-done)

;;;; The server comes and goes

(defun amacs-shell--say-what-was-kept ()
  "The server stopped mid-turn: say so once, with what of this turn is on disk.
An input is said to be saved only if the server confirmed it was
written to agent-chat.org; otherwise it is in the history.
The transport's notice (`amacs-stopped': what happened, how to go on,
the log) and these facts are one notice, each line a `;;' line."
  (let* ((turn (amacs-shell--turn))
         (replied (amacs-shell-turn-replied turn))
         (saved (cl-remove-if-not #'cdr (amacs-shell-turn-taken turn)))
         (unsaved (cl-remove-if #'cdr (amacs-shell-turn-taken turn)))
         (history (substitute-command-keys "\\<amacs-shell-mode-map>\\[comint-previous-input]"))
         (kept (delq nil
                     (list (cond ((and saved replied)
                                  " before the agent's turn ended; your input and the reply shown are saved in agent-chat.org")
                                 (saved (format " before the agent replied; your input is saved in agent-chat.org, not answered (%s brings it back)"
                                                history)))
                           (and unsaved
                                (format "%s your input%s went to the agent that asked, not to agent-chat.org: %s brings %s back"
                                        (if saved "; and" ";") (if (cdr unsaved) "s" "")
                                        history (if (cdr unsaved) "them" "it")))))))
    (when saved (amacs-shell--set 'amacs-shell--stop-said t))
    (when (and kept (amacs-shell--buffer))
      ;; Without `amacs-stopped' the server was stopped on purpose (`amacs-restart').
      (let ((stop (or amacs-stopped
                      (cons "The server stopped"
                            (and saved (not replied) "Send again to continue.")))))
        (setq amacs-stopped nil)          ; said here: the transport says no more
        (amacs-shell--output
         (amacs-shell--comment-lines
          (concat (car stop) (apply #'concat kept) "." (and (cdr stop) (concat " " (cdr stop)))))
         'amacs-shell-warning)))))

(defvar-local amacs-shell--resumed nil
  "Non-nil once this shell has shown the earlier exchanges.")

(defun amacs-shell--resume (&optional said)
  "Show the last exchanges of agent-chat.org; greet a new person.
A line above them says they are resumed, unless SAID: the caller has
said what they are (a rewind, whose line ends \"The conversation up to
there:\").  The ▸ changed lines this Emacs showed are shown with their
turns (`amacs-changes-kept'); a line says why older turns have none (a
start's, when one of them evaluated)."
  (let ((buffer (amacs-shell--buffer))
        (recent (amacs-shell--from-an-input (amacs-status :recent) amacs-shell-resume-exchanges)))
    (when (and buffer (not (buffer-local-value 'amacs-shell--resumed buffer)))
      (with-current-buffer buffer
        (setq amacs-shell--resumed t))     ; once per shell, even when there is nothing to show
      (let* ((connection (amacs-current-connection))
             (changed (amacs-changes-kept connection (or (amacs-status :tick) 0)))
             (since (amacs-changes-seen-since connection)))
        (cond
         ((null (amacs-status :recent))
          (amacs-shell--output
           (substitute-command-keys
            (concat ";; Type to the agent and press RET (\\<amacs-shell-mode-map>\\[amacs-shell-newline] for a new line).  "
                    "\\[amacs-shell-interrupt] interrupts.\n"
                    ;; With no key no question is answered: the server's note, said next,
                    ;; says what to do instead (the demo, a key, another endpoint).
                    (if (amacs-status :key-ok)
                        ";; Ask it \"what can you do?\", or \\[describe-mode] for every key."
                      ";; \\[describe-mode] lists every key.")))
           'amacs-shell-annotation))
         (t
          (unless said
            (amacs-shell--output
             (substitute-command-keys
              ";; Resumed: the last exchanges from agent-chat.org (\\<amacs-shell-mode-map>\\[amacs-open-chat-log] opens it all):")
             'amacs-shell-annotation))
          ;; A rewind's replay says it of any turn before this Emacs; a start's,
          ;; of a turn that evaluated (one that did not changed nothing).
          (when (cl-loop for e in recent
                         thereis (and (plist-get e :tick) (<= (plist-get e :tick) since)
                                      (or said (plist-get e :eval))))
            (amacs-shell--output
             ;; What their evals changed is known only in the Emacs they ran in.
             (format ";; (Turns up to tick %d were in an earlier Emacs: no ▸ changed lines.)" since)
             'amacs-shell-annotation))
          (amacs-shell--replay
           recent (cl-member-if-not (lambda (c) (< (car c) (or (plist-get (car recent) :tick) 0))) changed)
           since)))))))

(defun amacs-shell--replay (recent changed &optional since)
  "Show RECENT, exchanges of the chat log, as the live shell showed them.
CHANGED are the ▸ changed lines of their turns, (TICK . LINE) oldest
first, TICK the tick the turn ended at: each shows after its turn.
Turns up to tick SINCE ran in an earlier Emacs: a reply of theirs that
points at its ▸ changed line is followed, where that line was, by a
note saying why it is not there."
  (let ((flush (lambda (before)
                 (while (and changed (or (null before) (< (caar changed) before)))
                   (amacs-shell--output (cdr (pop changed)) 'amacs-shell-eval)
                   (amacs-shell--editing (amacs-shell--fresh-line t)))))) ; as the turn's end left it
    (dolist (entry recent)
      (funcall flush (plist-get entry :tick)) ; a later tick is a later turn's
      (when (plist-get entry :human)
        (amacs-shell--output (amacs-shell--input-line
                              (concat amacs-shell-prompt (plist-get entry :human)))))
      ;; The tasks that ended before the reply was said, then after it: where the live shell put them.
      (dolist (task (append (plist-get entry :tasks) nil))
        (when (plist-get task :before-reply) (amacs-shell--task-ended task)))
      (when (plist-get entry :status)   ; no reply, and why: as the live shell said it
        (amacs-shell--output (concat ";; (" (plist-get entry :status) ")") 'amacs-shell-annotation))
      (unless (string-blank-p (or (plist-get entry :agent) "")) ; a tick that only evaluated
        (amacs-shell--editing
          (amacs-shell--fresh-line t)
          (amacs-shell--insert-output (amacs-shell--resumed-reply (string-trim (plist-get entry :agent))))
          (amacs-shell--fresh-line t)))
      (let ((done (plist-get entry :eval)))  ; said, then evaluated: as the live shell drew it
        (when done
          (amacs-shell--eval-finish (amacs-shell--eval-line (plist-get done :form)) done)))
      (dolist (task (append (plist-get entry :tasks) nil))
        (unless (plist-get task :before-reply) (amacs-shell--task-ended task)))
      (when (and since (plist-get entry :tick) (<= (plist-get entry :tick) since)
                 (string-match-p "▸ changed" (or (plist-get entry :agent) "")))
        (amacs-shell--output
         ";; (No ▸ changed line here: what this turn changed was known only to the Emacs it ran in.)"
         'amacs-shell-annotation)))
    (funcall flush nil)))

(defun amacs-shell--from-an-input (entries count)
  "The last COUNT of ENTRIES, and those before them back to one with an input.
A resumed shell starts with the input that began the first turn it shows,
not with a later step of that turn."
  (let* ((all (append entries nil))
         (start (max 0 (- (length all) (max 0 count)))))
    (while (and (> start 0) (< start (length all)) (not (plist-get (nth start all) :human)))
      (setq start (1- start)))
    (nthcdr start all)))

(defun amacs-shell--resumed-reply (text)
  "Return TEXT, a reply from the chat log, as the live shell showed it."
  (amacs-shell--shown-reply text "\n"))

(defun amacs-shell--shown-reply (text &optional after)
  "Return reply TEXT, then AFTER (a string or nil), as the shell is to show them.
With org loaded it is rendered at once.  Without, it is drawn by
`amacs-render-quick' for now (org's look, by a few regexps) and marked
`amacs-unrendered': loading org takes ~1 s, which the person would wait
for before seeing the shell or its first answer, so it is rendered by
org once org is loaded, a piece at each idle moment
\(`amacs-render-after-preload')."
  (if (amacs-render-ready-p)
      (concat (amacs-render-org text) after)
    (let ((connection (amacs-current-connection)))
      (amacs-render-after-preload (lambda () (amacs-shell--render-resumed connection))))
    (propertize (concat (amacs-render-quick text) after) 'amacs-unrendered text)))

(defun amacs-shell--render-resumed (connection)
  "Render CONNECTION's replies shown plain, in place, as live ones are."
  (amacs-with-connection connection
   (amacs-shell--editing
    (let ((pos (point-min)))
      (while (setq pos (text-property-not-all pos (point-max) 'amacs-unrendered nil))
        (let* ((text (get-text-property pos 'amacs-unrendered))
               (end (next-single-property-change pos 'amacs-unrendered nil (point-max)))
               (after (if (eq (char-before end) ?\n) "\n" "")))
          (delete-region pos end)
          (goto-char pos)
          (insert (amacs-shell--output-props (concat (amacs-render-org text) after)))
          (setq pos (point))))))))

(defun amacs-shell--greet ()
  "Say what the server reported at hello: a missing key, an interrupted turn."
  (amacs-shell--resume)
  (amacs-shell--transition 'ready)
  (amacs-shell--on-tick (list :session (amacs-status :session)
                              :spent (amacs-status :spent)
                              :budget-limit (amacs-status :budget-limit)))
  (let ((notice (amacs-status :notice)))
    (when notice (amacs-shell--output (concat ";; " notice) 'amacs-shell-warning)))
  (let ((said (amacs-shell--get 'amacs-shell--stop-said)))
    (amacs-shell--set 'amacs-shell--stop-said nil)
    (when (and (amacs-status :interrupted) (not said)) ; said when the server stopped
      (amacs-shell--output
       ";; Your last message got no reply before the server stopped; it is kept in agent-chat.org. Send again to continue."
       'amacs-shell-warning)))
  (amacs-shell--restore-draft))

(defun amacs-shell--on-disconnect ()
  "The server went away: close the stream, say what was kept and what was not sent."
  (amacs-shell--discard-stream "the server stopped")
  (amacs-shell--say-what-was-kept)
  (amacs-shell--drop-queued "The server stopped before it said it had saved this input" t)
  (amacs-shell--set 'amacs-shell--agents nil)
  (amacs-shell--draw-agents)
  (let ((waiting (let ((buffer (amacs-shell--buffer)))
                   (and buffer (with-current-buffer buffer
                                 (amacs-shell--footer-lines 'amacs-queued))))))
    ;; Input typed after the connection dropped waits for the next server: still busy.
    (amacs-shell--transition 'gone waiting)))

(defvar-local amacs-shell--greeted nil
  "Non-nil once this shell said how to reach the hub and the subagents.")

(defun amacs-shell--greet-once ()
  "Say once per shell how to reach the hub and talk to a subagent."
  (let ((buffer (amacs-shell--buffer)))
    (when (and buffer (not (buffer-local-value 'amacs-shell--greeted buffer)))
      (with-current-buffer buffer (setq amacs-shell--greeted t))
      (amacs-shell--note (substitute-command-keys
                          "\\<amacs-shell-mode-map>\\[amacs-hub] shows the agent and its subagents; \
@NAME text talks to one by the name shown there or in the footer while it works.")))))

(add-hook 'amacs-ready-hook #'amacs-shell--greet)

(add-hook 'amacs-ready-hook #'amacs-shell--greet-once 90)

(add-hook 'amacs-disconnect-hook #'amacs-shell--on-disconnect)

;;;; Commands

(defun amacs-shell-return ()
  "Send the input at the prompt; above it, act on what point is on.
On an eval line, show or hide its form and result.  On a turn's
\"▸ changed\" line, show the diff and offer to undo.  On a past input,
put it at the prompt to edit and send again (a draft there goes to the
kill ring).  Elsewhere above the prompt, send nothing: comint would
send the line point is on, a reply's text or an input with its prompt."
  (interactive)
  (amacs-shell--revive)
  (let ((pmark (marker-position (process-mark (get-buffer-process (current-buffer)))))
        input)
    (cond ((>= (point) pmark) (comint-send-input))
          ((and (< (point) (marker-position amacs-shell--out))
                (get-text-property (point) 'amacs-eval))
           (amacs-shell-toggle))
          ((and (< (point) (marker-position amacs-shell--out))
                (amacs-changes-at (point)))
           (amacs-changes-show (amacs-changes-at (point))))
          ((setq input (amacs-shell--past-input (point)))
           (let ((draft (buffer-substring pmark (point-max))))
             (unless (string-empty-p draft) (kill-new draft))
             (delete-region pmark (point-max))
             (goto-char (point-max))
             (insert input)
             (message "%s" (substitute-command-keys
                            (concat "Edit, then \\<amacs-shell-mode-map>\\[amacs-shell-return] sends it "
                                    "(or \\[amacs-rewind] returns the agent to before it)"
                                    (if (string-empty-p draft) "" "; your draft is in the kill ring (\\[yank])"))))))
          (t (message "%s" (substitute-command-keys
                            "\\<amacs-shell-mode-map>\\[amacs-shell-return] sends from the prompt; on a past input it puts that input there"))))))

(defconst amacs-shell--said-at-once t
  "Why the commands that ask the server say at once what they do.
Emacs 28's \\[execute-extended-command], after a command without a key
that leaves the echo area empty, looks for a shorter name to suggest
inside `while-no-input', and keys typed meanwhile are lost.  With a
message shown it waits on `sit-for' instead, which typing ends, and
nothing is lost; but it looks 2 s later, and keys typed while it looks
\(seconds on a busy machine) were lost but the first: in the shell,
`extended-command-suggest-shorter' is off.")

;;;###autoload (autoload 'amacs-set-budget "amacs" "Set the agent's budget limit." t)
(defun amacs-set-budget (dollars)
  "Set the agent's budget limit to DOLLARS.
An agent stopped at its limit goes on with your next input.  Raised
above what is spent, the input the budget refused last is put back at
the prompt, not sent: RET sends it.  A model with no price (none listed,
none in `amacs-price-table') that is not served on this machine cannot
have a limit: the server refuses it in one line."
  (interactive
   (let ((now (or (plist-get (or (amacs-shell--get 'amacs-shell-usage) amacs-shell-usage) :budget-limit)
                  5.0)))
     ;; The limit now beside the default (twice it): the prompt says what it is.
     (list (read-number (format "Budget limit in dollars, now %s: "
                                (amacs-shell--dollars now))
                        (* 2 now)))))
  ;; Said at once: see `amacs-shell--said-at-once'.
  (message "AMACS: setting the budget limit to %s…" (amacs-shell--dollars dollars))
  (amacs-when-ready
   (lambda ()
     ;; A limit is counted in the model's price: one just put in `amacs-price-table' goes first.
     (let ((refused (amacs--send-changed-settings)))
       (if refused
           (amacs--say "AMACS: %s" refused)
         (amacs-call 'set_budget (list dollars)
                     (lambda (answer)
                       (let ((limit (plist-get answer :limit)))
                         (amacs-choose :budget limit)
                         (amacs-shell--on-tick
                          (plist-put (copy-sequence (or (amacs-shell--get 'amacs-shell-usage)
                                                        amacs-shell-usage))
                                     :budget-limit limit))
                         (message "AMACS: budget limit is now %s" (amacs-shell--dollars limit))
                         (when (plist-get answer :refused)
                           (amacs-shell--put-back-refused (plist-get answer :refused) limit))))))))))

(defun amacs-shell--put-back-refused (input limit)
  "Put INPUT back at the prompt: the budget refused it; LIMIT is above the spend.
It is not sent: the person sends it (\[amacs-shell-return]), edits it, or
does not.  What was typed at the prompt goes to the kill ring."
  (let ((buffer (amacs-shell--buffer)) (draft ""))
    (when buffer
      (with-current-buffer buffer
        (let ((start (min (point-max) (+ amacs-shell--prompt-start (length amacs-shell-prompt)))))
          (setq draft (buffer-substring-no-properties start (point-max)))
          (unless (equal (string-trim draft) (string-trim input))
            (unless (string-blank-p draft) (kill-new draft))
            (let ((inhibit-read-only t))
              (delete-region start (point-max))
              (goto-char (point-max))
              (insert input))))
        (goto-char (point-max))
        (dolist (window (get-buffer-window-list buffer nil t))
          (set-window-point window (point-max))))
      (amacs-shell--note
       (substitute-command-keys
        (format "The budget limit is now %s: your last input, which the budget stopped, is back at the prompt, not sent (\\<amacs-shell-mode-map>\\[amacs-shell-return] sends it)%s."
                (amacs-shell--dollars limit)
                (if (or (string-blank-p draft) (equal (string-trim draft) (string-trim input)))
                    ""
                  "; what you had typed there is in the kill ring (\\[yank])")))))))

(defun amacs-shell--url-p (url)
  "Return non-nil if URL has http:// or https:// and a host after it."
  (string-match-p "\\`https?://[^/[:space:]]" url))

(defun amacs-shell--read-base-url (initial)
  "Read a base URL, starting from INITIAL; nil when left empty.
One without http:// or https:// is asked for again, with http:// put
before it: a model server's address alone (localhost:8080) is no URL,
and the model calls would fail only later, as if the network were down."
  (let ((url (read-string "Base URL (empty: the one the server started with): " initial)))
    (while (not (or (string-empty-p url) (amacs-shell--url-p url)))
      (setq url (read-string (format "%s is no URL (it starts with http:// or https://); Base URL: " url)
                             (concat "http://" (replace-regexp-in-string "\\`[a-z]*:/+" "" url)))))
    (unless (string-empty-p url) url)))

(defun amacs-shell--read-window ()
  "Read a model's input window in tokens; nil when left empty.
Anything but a positive whole number is asked for again."
  (let ((answer (or (read-string "Context window in tokens (empty: as its server says): ") "")))
    (while (not (or (string-empty-p (string-trim answer))
                    (string-match-p "\\`[[:space:]]*[1-9][0-9]*[[:space:]]*\\'" answer)))
      (setq answer (or (read-string (format "%s is no number of tokens; Context window (empty: as its server says): "
                                            answer))
                       "")))
    (and (not (string-empty-p (string-trim answer))) (string-to-number answer))))

;;;###autoload (autoload 'amacs-set-model "amacs" "Switch the agent's model or backend." t)
(defun amacs-set-model (backend model &optional base-url window)
  "Switch the agent to MODEL on BACKEND from its next model call.
BACKEND is \"anthropic\" or \"openai\" (any OpenAI-compatible server);
BASE-URL points at such a server, e.g. Ollama or llama.cpp.  WINDOW is
the model's input window in tokens, when you know it better than its
server (a proxy may report its price list's): the context is fitted to it."
  (interactive
   (let* ((now (or (amacs-status :backend) "anthropic"))
          (backend (completing-read (format-prompt "Backend" now) '("anthropic" "openai") nil t nil nil now)))
     (list backend
           (read-string "Model: " (amacs-status :model))
           (amacs-shell--read-base-url (and (equal backend "openai") "http://localhost:11434/v1"))
           (amacs-shell--read-window))))
  (when (and base-url (not (amacs-shell--url-p base-url)))
    (user-error "Not a base URL: %s (it starts with http:// or https://)" base-url))
  (unless (or (null window) (natnump window))
    (user-error "Not a number of tokens: %s" window))
  (message "AMACS: switching to %s on %s…" model backend) ; said at once: `amacs-shell--said-at-once'
  (amacs-when-ready
   (lambda ()
     (amacs-call 'set_model (append (list backend model base-url) (and window (> window 0) (list window)))
                 (lambda (now)
                   (let ((connection (amacs-current-connection)))
                     (dolist (key '(:model :backend :key-ok :endpoint))
                       (setf (amacs-wire-status (amacs-connection-wire connection))
                             (plist-put (amacs-wire-status (amacs-connection-wire connection)) key (plist-get now key)))))
                   (amacs-choose :backend (plist-get now :backend) :model (plist-get now :model)
                                 :base-url base-url :window (and window (> window 0) window)
                                 :local nil :demo nil) ; a restart no longer runs a local or demo model
                   (amacs-shell--update-header)
                   (amacs-shell--note (concat (format "Now using %s on %s%s." (plist-get now :model)
                                                      (plist-get now :backend)
                                                      (if base-url (format " at %s" base-url) ""))
                                              ;; What the server still lacks to call it, in its words.
                                              (and (not (plist-get now :key-ok)) (plist-get now :missing)
                                                   (concat " " (plist-get now :missing)))
                                              ;; A limit the new model's unknown price cannot count.
                                              (and (plist-get now :unkept)
                                                   (concat " " (plist-get now :unkept))))))))))

(defconst amacs-shell--address-regexp "\\`@\\([[:alnum:]_-]+\\)[[:space:]]+\\([^z-a]*[^[:space:]][^z-a]*\\)\\'"
  "An input addressed to a subagent: @NAME, then what to say to it.")

(defun amacs-shell--say-to-agent (agent text line)
  "Say TEXT to the subagent AGENT (its id or a viewpoint's name); LINE is as typed.
Its answer shows in the shell under its name; the primary's turn goes on
untouched.  The server refuses an agent that does not exist or has ended."
  (amacs-shell--editing
    (delete-region amacs-shell--prompt-start (point-max))
    (amacs-shell--fresh-line)
    (amacs-shell--insert-output (amacs-shell--input-line (if (string-suffix-p "\n" line) line (concat line "\n")) nil))
    (amacs-shell--insert-prompt))
  (goto-char (point-max))
  (amacs-when-ready
   (lambda ()
     (amacs-call 'person_agent_talk (list agent text)
                 (lambda (r) (cond ((plist-get r :paused)
                                    (amacs-shell--note (format "%s is paused; it reads this once resumed (z in the hub)."
                                                               (plist-get r :to))))
                                   ((plist-get r :queued)
                                    ;; It reads the person's text only once the work it is on is
                                    ;; done: a question about that work is answered after it.
                                    (let ((to (plist-get r :to)))
                                      (amacs-shell--note
                                       (format "%s is at work: it reads this once that work is done, then answers here as [%s]."
                                               to to))))))
                 (lambda (err) (amacs-shell--note (concat "Not sent: " err)))))))

(defun amacs-shell--input-sender (proc input)
  "Send INPUT (typed in PROC's buffer) to the primary, or to a subagent.
An input @NAME TEXT goes to the subagent NAME (a viewpoint's name, or
an id such as task-1 or compulsion-2); any other to the primary."
  (let ((text (string-trim (substring-no-properties input))))
    (if (string-match amacs-shell--address-regexp text)
        (progn (amacs-shell--save-history-safely text)
               (amacs-shell--say-to-agent (match-string 1 text) (match-string 2 text)
                                          (buffer-substring-no-properties amacs-shell--prompt-start (point-max))))
      (amacs-shell--send-to-primary proc input))
    (amacs-shell--save-draft)))           ; the prompt is empty: sent text never comes back

(defun amacs-shell--send-to-primary (_proc input)
  "Send INPUT to the agent; return at once.  The history is saved each time.
The line sent waits in the footer as queued until the agent takes it."
  (amacs-shell--save-history-safely input)
  (let* ((text (string-trim (substring-no-properties input)))
         (line (buffer-substring-no-properties amacs-shell--prompt-start (point-max)))
         (id nil))
    (amacs-shell--editing
      (delete-region amacs-shell--prompt-start (point-max))
      (unless (string-empty-p text)
        (setq id (amacs-shell--queue (if (string-suffix-p "\n" line) line (concat line "\n")))))
      (amacs-shell--insert-prompt))
    (goto-char (point-max))
    (unless (string-empty-p text)
      (amacs-shell--transition 'sent)
      (amacs-when-ready
       (lambda ()
         (amacs-shell--mark-sent id)
         (let ((refused (amacs--send-changed-settings)))
           (when refused (amacs-shell--note (concat "Settings not applied: " refused))))
         (amacs-call 'submit (list text) nil
                     (lambda (err)
                       (amacs-shell--take-queued 'amacs-shell-error (concat ";; Not sent: " err) nil id))))))))

(defun amacs-shell-interrupt ()
  "Stop the agent's turn: its model call and the evaluations it chains.
Your input stays in the chat log; the tick is recorded as interrupted.
While the server is still starting, the input waiting for it is not sent."
  (interactive)
  (cond
   ((amacs-live-p)
    (amacs-call 'interrupt nil
                (lambda (running)
                  (unless running (message "AMACS: the agent is not working on anything")))))
   ((> (amacs-cancel-waiting) 0)
    (amacs-shell--drop-queued "interrupted before the server was ready" 'waiting)
    (amacs-shell--transition 'cancelled))
   (t (message "AMACS: no server to interrupt"))))

(defun amacs-shell-newline ()
  "Insert a newline in the input; RET sends it."
  (interactive)
  (insert "\n"))

(defun amacs-shell-copy-reply ()
  "Copy the agent's last reply (its plain org text) to the kill ring."
  (interactive)
  (unless amacs-shell--last-reply (user-error "No reply yet"))
  (kill-new amacs-shell--last-reply)
  (message "Copied the last reply (%d characters)" (length amacs-shell--last-reply)))

(defun amacs-shell-copy-code ()
  "Copy the code of the source block at point to the kill ring."
  (interactive)
  (let ((code (amacs-render-code-at-point)))
    (unless code (user-error "Point is not in a source block"))
    (kill-new code)
    (message "Copied %d lines of code" (length (split-string code "\n" t)))))

;;;; Leaving while the agent works

(defun amacs-shell--go-on-p (what then)
  "Return non-nil when the person may WHAT now.
At once when the agent is not working on a turn; else if the person
answers yes to \"AMACS is working on your turn; WHAT anyway (THEN)?\"."
  (or (not (amacs-shell-busy-p))
      (not (amacs-live-p))
      (yes-or-no-p (format "AMACS is working on your turn; %s anyway (%s)? " what then))))

(defun amacs-shell--query-kill ()
  "Ask before the shell buffer is killed while the agent works on a turn.
On the shell's `kill-buffer-query-functions': the turn goes on without
the shell, and its reply is seen only in agent-chat.org, or in the last
exchanges \[amacs-shell] shows in a new shell."
  (amacs-shell--go-on-p "kill the shell" "the turn goes on; M-x amacs-shell shows it"))

(defun amacs-shell--query-stop-server ()
  "Ask, as the shell of another home (a fork's) is killed: stop its server too?
On the shell's `kill-buffer-query-functions', after the question about
a turn at work; the buffer is killed either way.  Its server (and the
local model and MCP servers it runs) ran on until Emacs exited, with no
shell to show it.  The shell of this Emacs's own home (`amacs-home')
leaves its server running: \[amacs-shell] opens it again at once."
  (let ((connection amacs--buffer-connection))
    (when (and (amacs-connection-p connection)
               (not (equal (directory-file-name (amacs-connection-home connection))
                           (directory-file-name (amacs--home-directory))))
               (process-live-p (amacs-life-process (amacs-connection-life connection))))
      (setf (amacs-life-stop-with-shell (amacs-connection-life connection))
            (y-or-n-p (format "Stop the AMACS server of %s too (y), or leave it running until Emacs exits (n)? "
                              (amacs-connection-name connection)))))
    t))

(defun amacs-shell--stop-server-with-buffer ()
  "Stop the server of the shell being killed, if the person said so.
Its hub and the hub's views of commits close with it: they showed a
server that is gone.  A server left running keeps them."
  (let ((connection amacs--buffer-connection))
    (when (and (amacs-connection-p connection)
               (amacs-life-stop-with-shell (amacs-connection-life connection)))
      (setf (amacs-life-stop-with-shell (amacs-connection-life connection)) nil)
      (amacs-stop-server connection)
      (dolist (buffer (cons (amacs-ui-hub (amacs-connection-ui connection))
                            (mapcar (lambda (view) (get-buffer (amacs-connection-buffer-name connection view)))
                                    '("abandoned" "commit"))))
        (when (buffer-live-p buffer)
          (quit-windows-on buffer t)
          (when (buffer-live-p buffer) (kill-buffer buffer)))))))

(defun amacs-shell--forget-buffer ()
  "Forget the stream of the shell buffer being killed: its markers go with it.
Its turn's timers stop.  Events of the turn still coming find no shell
and do nothing; a new shell starts clean."
  (setq amacs-shell--stream-start nil amacs-shell--stream-end nil)
  (let ((turn amacs-shell--turn-of-buffer))
    (when turn
      ;; The turn goes on without the shell: a new shell on this home starts busy.
      (when (amacs-connection-p amacs--buffer-connection)
        (setf (amacs-ui-shell-busy (amacs-connection-ui amacs--buffer-connection))
              (amacs-shell-turn-busy turn)))
      (dolist (timer (list (amacs-shell-turn-clock turn) (amacs-shell-turn-wait-timer turn)))
        (when timer (cancel-timer timer))))))

(defun amacs-shell--query-quit ()
  "Ask before Emacs quits while the agent works on a turn; non-nil to quit.
On `kill-emacs-query-functions', as Emacs asks about live processes:
quitting stops the turn (the person's input is saved, the reply that
was coming is not)."
  (or (not amacs-shell-busy)              ; any shell's: quitting stops every turn
      (not (amacs-live-connections))
      (yes-or-no-p "AMACS is working on your turn; quit anyway (your input is saved)? ")))

;;;; The mode

(defvar amacs-shell-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'amacs-shell-return)
    ;; As in ielm: C-j sends too.  Enter typed ahead while Emacs starts reaches
    ;; it through the terminal's cooked mode as C-j, and must not be lost.
    (define-key map (kbd "C-j") #'comint-send-input)
    (define-key map (kbd "S-<return>") #'amacs-shell-newline)
    (define-key map (kbd "TAB") #'amacs-shell-tab)
    (define-key map (kbd "<backtab>") #'amacs-shell-previous-eval)
    (define-key map (kbd "C-c C-e") #'amacs-compose)
    (define-key map (kbd "C-c C-c") #'amacs-shell-interrupt)
    ;; The hub: C-c C-v, "view the agent's mind".  Not C-c C-h, which is the
    ;; help for the C-c prefix; not C-c C-a (comint's beginning of input, and
    ;; screen's prefix) nor C-c C-b (tmux's prefix).
    (define-key map (kbd "C-c C-v") #'amacs-hub)
    (define-key map (kbd "C-c C-l") #'amacs-open-chat-log)
    (define-key map (kbd "C-c C-w") #'amacs-shell-copy-code)
    (define-key map (kbd "C-c M-w") #'amacs-shell-copy-reply)
    ;; comint's own stop wherever text is not an output field: on eval lines too.
    (define-key map [remap comint-previous-prompt] #'amacs-shell-previous-prompt)
    (define-key map [remap comint-next-prompt] #'amacs-shell-next-prompt)
    ;; comint's C-d at the end sends EOF, which ended the shell's placeholder
    ;; process and with it the shell; C-c C-z would stop it.
    (define-key map (kbd "C-d") #'amacs-shell-delete-char)
    (define-key map (kbd "C-c C-z") #'undefined)
    ;; comint's keys and Signals menu for a subprocess: there is none here, and
    ;; C-c C-d's EOF would end the placeholder process and with it the shell.
    (dolist (command '(comint-send-eof comint-quit-subjob comint-stop-subjob comint-kill-subjob
                       comint-continue-subjob comint-interrupt-subjob))
      (define-key map (vector 'remap command) #'amacs-shell-no-subprocess))
    ;; comint's C-c C-o and C-c M-o delete output: here the output is the
    ;; conversation, which the person reads back and rewinds to.
    (dolist (command '(comint-delete-output comint-clear-buffer))
      (define-key map (vector 'remap command) #'amacs-shell-keep-conversation))
    map)
  "Keymap of `amacs-shell-mode'.")

(define-derived-mode amacs-shell-mode comint-mode "AMACS"
  "The AMACS shell: talk to the agent, which works in this Emacs.
Type at the prompt and press \\[amacs-shell-return] (or \\[comint-send-input]) to send
\(\\[amacs-shell-newline] for a new line, \\[comint-kill-input] to delete the input,
\\[amacs-compose] to write a long prompt in a buffer of its own).  Input
sent while the agent works waits, shown as queued, until it takes it;
\\[amacs-shell-interrupt] interrupts its turn, \\[keyboard-quit] stops an eval that runs.

Above the prompt everything is the conversation, read-only: replies
in org, notes (;;), and a line (▸ eval …) for each form the agent
evaluated.  \\[amacs-shell-tab] or \\[amacs-shell-return] on such a line shows its form and
result; elsewhere \\[amacs-shell-tab] goes to the next one, \\[amacs-shell-previous-eval] to the one before.
\\[amacs-shell-return] on a past input puts it at the prompt to send again;
\\[amacs-shell-previous-prompt] and \\[amacs-shell-next-prompt] go from input to input, \\[comint-previous-input]
brings back earlier inputs (kept across sessions).

\\[amacs-hub] opens the hub (the agent's state and its subagents),
\\[amacs-open-chat-log] the chat log (agent-chat.org), \\[amacs-shell-copy-reply] copies the last reply
and \\[amacs-shell-copy-code] the source block at point.  The header line says what the
agent is doing, the mode line what this session cost.

Commands by name (\\[execute-extended-command]): `amacs-rewind' returns the agent's mind to
before a past input, `amacs-fork' copies it there into a new home,
`amacs-restart' starts the server again, `amacs-set-budget' and
`amacs-set-model' change the limit and the model.

\\{amacs-shell-mode-map}"
  (setq comint-prompt-regexp (concat "^" (regexp-quote amacs-shell-prompt)))
  ;; The shell is no command shell: once shell.el is loaded its directory
  ;; tracking is on in every buffer (its default), and C-h m listed it here.
  (setq-local shell-dirtrackp nil)
  ;; Typing soon after a command run by name is kept: see `amacs-shell--said-at-once'.
  (setq-local extended-command-suggest-shorter nil)
  (let ((connection (amacs-current-connection)))
    (setq amacs--buffer-connection connection)
    (setf (amacs-ui-shell (amacs-connection-ui connection)) (current-buffer))
    (setq amacs-shell--turn-of-buffer
          (amacs-shell--new-turn :busy (amacs-ui-shell-busy (amacs-connection-ui connection)))))
  (setq-local paragraph-separate "\\'")
  (setq-local paragraph-start comint-prompt-regexp)
  (setq-local comint-input-sender #'amacs-shell--input-sender)
  (setq-local comint-process-echoes nil)
  (setq-local comint-prompt-read-only t)
  ;; Typing or yanking in the read-only output goes to the input at the end, not lost.
  (setq-local comint-scroll-to-bottom-on-input 'this)
  (setq-local comint-use-prompt-regexp nil)
  (setq-local comint-input-ring-file-name (amacs-shell--history-file))
  (setq-local comint-input-ring-size amacs-shell-history-size)
  (setq-local comint-input-ignoredups t)
  (setq-local header-line-format '(:eval (amacs-shell-header-line)))
  ;; A window whose point follows the output scrolls as little as shows that point,
  ;; in redisplay itself: a layout of our own per redisplay
  ;; (`pos-visible-in-window-p', `recenter') cost 2-3 ms a frame.
  (setq-local scroll-conservatively 101)
  (setq-local comint-output-filter-functions nil) ; RET: comint's scroll-to-bottom walks every window
  (setq-local mode-line-format amacs-shell-mode-line)
  (setq-local word-wrap t)
  (amacs-render-prepare-buffer)
  (amacs-shell--read-history)
  (add-hook 'window-size-change-functions #'amacs-shell--refit nil t)
  (add-hook 'kill-buffer-hook #'amacs-shell--save-history-safely nil t)
  (add-hook 'kill-buffer-hook #'amacs-shell--forget-buffer nil t)
  (add-hook 'kill-buffer-query-functions #'amacs-shell--query-kill nil t)
  (add-hook 'kill-buffer-query-functions #'amacs-shell--query-stop-server 90 t)
  (add-hook 'kill-buffer-hook #'amacs-shell--stop-server-with-buffer 90 t)
  (add-hook 'kill-emacs-hook #'amacs-shell--save-history-everywhere)
  (add-hook 'kill-emacs-query-functions #'amacs-shell--query-quit)
  (unless (comint-check-proc (current-buffer))
    (amacs-shell--start-placeholder)
    (let ((inhibit-read-only t))
      (goto-char (point-max))
      (setq amacs-shell--out (copy-marker (point) t)
            amacs-shell--prompt-start (copy-marker (point) t))
      (amacs-shell--insert-prompt)
      (amacs-shell--keep-draft (expand-file-name "shell-draft" (amacs-connection-home
                                                                 (amacs-current-connection)))))))

(defun amacs-shell--start-placeholder ()
  "Give the shell the process comint needs; the agent is not a subprocess.
Its sentinel writes nothing: comint's wrote \"Process amacs-shell finished\"."
  (let ((proc (condition-case nil
                  (start-process "amacs-shell" (current-buffer) "hexl")
                (file-error (start-process "amacs-shell" (current-buffer) "cat")))))
    (set-process-query-on-exit-flag proc nil)
    (set-process-sentinel proc #'ignore)
    proc))

(defun amacs-shell--revive ()
  "Start the placeholder process again if it has gone.
The input at the prompt stays."
  (when (and (derived-mode-p 'amacs-shell-mode) (not (comint-check-proc (current-buffer))))
    (set-marker (process-mark (amacs-shell--start-placeholder))
                (min (point-max) (+ amacs-shell--prompt-start (length amacs-shell-prompt))))))

(defun amacs-shell-delete-char (n)
  "Delete the N characters after point; at the end of the input, nothing.
Not an error there: Emacs discards the keys typed after a command that
fails (`command-error-default-function'), so what the person typed
right after \[amacs-shell-delete-char] at the end was lost."
  (interactive "p")
  (delete-char (if (> n 0) (min n (- (point-max) (point))) n)))

(defun amacs-shell-keep-conversation ()
  "Say that the conversation above the prompt stays, and where else it is."
  (interactive)
  (message "%s" (substitute-command-keys
                 "The conversation stays in the shell (it is what \\[amacs-rewind] goes back over); \\<amacs-shell-mode-map>\\[amacs-open-chat-log] opens it as org")))

(defun amacs-shell-no-subprocess ()
  "Say that the shell has no subprocess to signal, and what stops the agent."
  (interactive)
  (message "%s" (substitute-command-keys
                 "The AMACS shell runs no subprocess: \\<amacs-shell-mode-map>\\[amacs-shell-interrupt] interrupts the agent")))

(defun amacs-shell--buffer-for (connection)
  "CONNECTION's shell buffer, made (not yet in its mode) if it has none."
  (let ((shell (amacs-ui-shell (amacs-connection-ui connection))))
    (if (buffer-live-p shell)
        shell
      (let ((buf (get-buffer-create (amacs-shell--buffer-name connection))))
        (if (and (with-current-buffer buf (derived-mode-p 'amacs-shell-mode))
                 (not (eq (buffer-local-value 'amacs--buffer-connection buf) connection)))
            (generate-new-buffer (amacs-shell--buffer-name connection)) ; another home's
          buf)))))

(defun amacs-shell--open (connection)
  "Open CONNECTION's shell and start its server if needed; return the buffer."
  (amacs-with-connection connection
    ;; The server first: its start-up (Python's imports) overlaps loading the rest
    ;; of the client and making the shell.  A start that fails
    ;; at once is tried again by `amacs-when-ready' below, which says why in the shell.
    (amacs-start-server connection)     ; nothing when a server is live or starting
    (require 'amacs)                    ; reached by autoload: the agent API and buffer reads too
    (let ((buf (amacs-shell--buffer-for connection)))
      (with-current-buffer buf
        (if (derived-mode-p 'amacs-shell-mode)
            (amacs-shell--revive)
          (amacs-shell-mode)
          ;; A new shell on a live server (the last one was killed): its hello was
          ;; long ago, so ask for the last exchanges now.  A turn going on streams
          ;; below them: its events wait until they are shown.
          (when (amacs-live-p)
            (amacs-hold-events)
            (amacs-call 'status nil
                        (lambda (status)
                          (setf (amacs-wire-status (amacs-connection-wire connection))
                                (append status (amacs-wire-status (amacs-connection-wire connection))))
                          ;; Mid-turn, the last input has no reply yet: not a stopped server's.
                          (amacs-shell--set 'amacs-shell--stop-said (amacs-shell-busy-p))
                          (amacs-shell--greet)
                          (amacs-release-events))
                        (lambda (err)
                          (amacs-release-events)
                          (amacs-shell--note (concat "Could not show the last exchanges: " err)))))))
      (setq amacs-transport-message-function #'amacs-shell--note)
      (pop-to-buffer-same-window buf)
      (unless (amacs-live-p) (amacs-shell--transition 'opened))
      ;; Org loads (a file at each idle moment) once the server is ready: loaded
      ;; while it starts, it held the greeting and "waiting for you" until it was done.
      (amacs-when-ready #'amacs-render-preload)
      buf)))

(provide 'amacs-shell)
;;; amacs-shell.el ends here
