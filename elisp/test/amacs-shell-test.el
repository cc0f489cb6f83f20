;;; amacs-shell-test.el --- ERT tests for the shell's buffer model -*- lexical-binding: t -*-

;;; Commentary:

;; Issue 9: the shell's output, footer and prompt; streamed regions that
;; end cleanly on every failure; input queued while the agent works;
;; point that follows output only from the input area; eval lines and
;; `amacs-eval-confirm'; replies rendered by org.  No server: the calls
;; it would receive are recorded.  The same behaviour is tested in a
;; real terminal by tests/tmux/.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'amacs)
(require 'amacs-test-helpers)

(defvar amacs-shell-test--calls nil
  "Server calls the shell made during a test: (METHOD ARGS), newest first.")

(defun amacs-shell-test--kill-shell ()
  "Kill the buffer named `amacs-shell-buffer-name', if there is one, without asking."
  (let ((buf (get-buffer amacs-shell-buffer-name)))
    (when buf
      (with-current-buffer buf (setq-local kill-buffer-query-functions nil))
      (kill-buffer buf))))

(defmacro amacs-shell-test--with-shell (&rest body)
  "Run BODY in a fresh shell shown in the selected window, with no server.
Calls to the server are recorded in `amacs-shell-test--calls'."
  (declare (indent 0))
  `(let ((buf (progn (amacs-shell-test--kill-shell)    ; one a test before left, of another home
                     (get-buffer-create amacs-shell-buffer-name)))
         (amacs-home (make-temp-file "amacs-shell-test" t))
         (amacs--connections nil)         ; the shell makes the one of `amacs-home'
         (amacs--current nil)
         (amacs-shell-busy nil)
         (amacs-shell-test--calls nil))
     (cl-letf (((symbol-function 'amacs-when-ready) (lambda (fn) (funcall fn)))
               ((symbol-function 'amacs-live-p) (lambda (&rest _) t))
               ((symbol-function 'amacs-call)
                (lambda (method args &rest _) (push (list method args) amacs-shell-test--calls))))
       (unwind-protect
           (progn
             (set-window-buffer (selected-window) buf)
             (with-current-buffer buf
               (amacs-shell-mode)
               (goto-char (point-max))
               ,@body))
         (when (buffer-live-p buf)
           (with-current-buffer buf (setq-local kill-buffer-query-functions nil))
           (kill-buffer buf))))))

(defun amacs-shell-test--text ()
  "The shell's text without properties."
  (with-current-buffer amacs-shell-buffer-name
    (buffer-substring-no-properties (point-min) (point-max))))

(defun amacs-shell-test--type-and-send (text)
  "Type TEXT at the prompt and press RET."
  (with-current-buffer amacs-shell-buffer-name
    (goto-char (point-max))
    (insert text)
    (comint-send-input)))

(defun amacs-shell-test--face-at (text)
  "The `font-lock-face' at the start of the first TEXT in the shell."
  (with-current-buffer amacs-shell-buffer-name
    (save-excursion
      (goto-char (point-min))
      (search-forward text)
      (get-text-property (match-beginning 0) 'font-lock-face))))

;;;; The buffer model

(ert-deftest amacs-shell-test-reply-and-note-go-above-the-prompt ()
  "Issue 9: an exchange reads input, reply, note, then a fresh prompt."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "what is 2+2?")
    (should (equal (cadr (car amacs-shell-test--calls)) '("what is 2+2?")))
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply '(:type "reply" :text "It is 4."))
    (amacs-shell--on-annotation '(:type "annotation" :text "retrying" :kind "warning"))
    (amacs-shell--on-turn-done '(:type "turn-done" :tick 2))
    (should (equal (amacs-shell-test--text)
                   "amacs> what is 2+2?\n\nIt is 4.\n\n;; retrying\n\namacs> "))
    (should (eq (amacs-shell-test--face-at ";; retrying") 'amacs-shell-warning))
    (should (= (point) (point-max)))))

(ert-deftest amacs-shell-test-input-sent-while-busy-is-queued-then-taken ()
  "Issue 9: input sent mid-stream waits in the footer; the stream never splits."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "first")
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply-delta '(:text "Two plus "))
    (amacs-shell-test--type-and-send "second")
    (amacs-shell--on-reply-delta '(:text "two is four."))
    (should (string-match-p "Two plus two is four\\.\namacs> second\namacs> \\'"
                            (amacs-shell-test--text)))
    (should (eq (amacs-shell-test--face-at "amacs> second") 'amacs-shell-queued))
    (with-current-buffer amacs-shell-buffer-name   ; labelled on screen, not in the text
      (goto-char (point-min))
      (search-forward "amacs> second")
      (should (string-match-p "queued" (get-text-property (point) 'display))))
    (amacs-shell--on-reply '(:text "Two plus two is four." :streamed t))
    (amacs-shell--on-turn-done nil)
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken nil)       ; the agent takes "second"
    (amacs-shell--on-reply '(:text "You said second."))
    (should (equal (amacs-shell-test--text)
                   (concat "amacs> first\n\nTwo plus two is four.\n\namacs> second\n\n"
                           "You said second.\n\namacs> ")))
    (should (equal (mapcar #'cadr (seq-filter (lambda (c) (eq (car c) 'submit)) amacs-shell-test--calls))
                   '(("second") ("first"))))))

(ert-deftest amacs-shell-test-multiline-input-moves-whole-and-in-order ()
  "Issue 9: an input of several lines is one queued entry; replies follow their inputs."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "hi")
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply '(:text "You said: hi"))
    (amacs-shell-test--type-and-send "first\nsecond")
    (amacs-shell-test--type-and-send "third")
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply '(:text "You said: first\nsecond"))
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply '(:text "You said: third"))
    (should (equal (amacs-shell-test--text)
                   (concat "amacs> hi\n\nYou said: hi\n\namacs> first\nsecond\n\nYou said: first\nsecond\n\n"
                           "amacs> third\n\nYou said: third\n\namacs> ")))
    (should-not (eq (amacs-shell-test--face-at "second\n\nYou") 'amacs-shell-queued))))

(ert-deftest amacs-shell-test-typed-input-is-never-touched-by-output ()
  "Issue 9: text typed but not sent stays in the input area, point after it."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "go")
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken nil)
    (insert "hello while busy")
    (dolist (piece '("Streaming " "deliberately " "slowly."))
      (amacs-shell--on-reply-delta (list :text piece)))
    (amacs-shell--on-reply '(:text "Streaming deliberately slowly." :streamed t))
    (amacs-shell--on-turn-done nil)
    (should (string-suffix-p "Streaming deliberately slowly.\n\namacs> hello while busy"
                             (amacs-shell-test--text)))
    (should (= (point) (point-max)))
    (should (equal (comint-get-old-input-default) "hello while busy"))))

(ert-deftest amacs-shell-test-point-follows-only-from-the-input-area ()
  "Issue 9: point at the prompt follows output; point moved up to read stays."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "one")
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply '(:text "First reply."))
    (should (= (window-point (selected-window)) (point-max)))
    (goto-char (point-min))
    (search-forward "First")
    (let ((reading (point)))
      (amacs-shell--on-reply '(:text "Second reply."))
      (should (= (point) reading))
      (should (= (window-point (selected-window)) reading)))
    (goto-char (point-max))
    (amacs-shell--on-reply-delta '(:text "streamed"))
    (should (= (point) (point-max)))
    (should (= (window-point (selected-window)) (point-max)))))

(ert-deftest amacs-shell-test-failed-stream-is-marked-and-the-next-deletes-nothing ()
  "Issue 9: a turn that fails mid-stream ends the region; the next reply keeps it."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "q1")
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply-delta '(:text "partial answer"))
    (amacs-shell--on-annotation '(:text "Model call failed: boom." :kind "error"))
    (amacs-shell--on-turn-done nil)
    (should-not amacs-shell--stream-start)
    (should (eq (amacs-shell-test--face-at "partial answer") 'amacs-shell-abandoned))
    (amacs-shell-test--type-and-send "q2")
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply-delta '(:text "Full"))
    (amacs-shell--on-reply '(:text "Full answer." :streamed t))
    (let ((text (amacs-shell-test--text)))
      (dolist (kept '("amacs> q1" "partial answer" ";; Model call failed: boom." "amacs> q2" "Full answer."))
        (should (string-match-p (regexp-quote kept) text))))))

(ert-deftest amacs-shell-test-disconnect-ends-the-stream-and-unsent-input ()
  "Issue 9: the server goes mid-stream: text discarded, queued input said unsent."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "q1")
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply-delta '(:text "cut short"))
    (amacs-shell-test--type-and-send "q2")
    (amacs-shell--on-disconnect)
    (should-not amacs-shell--stream-start)
    (should-not amacs-shell-busy)
    (should (eq (amacs-shell-test--face-at "cut short") 'amacs-shell-abandoned))
    (should (string-match-p "amacs> q2\n;; The server stopped before it said it had saved this input: "
                            (amacs-shell-test--text)))
    (amacs-shell--on-reply-delta '(:text "after restart"))
    (amacs-shell--on-reply '(:text "after restart" :streamed t))
    (should (string-match-p "cut short" (amacs-shell-test--text)))
    (should (string-suffix-p "after restart\n\namacs> " (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-saved-only-when-the-server-said-so ()
  "Issue 12: a server that stops mid-turn: the shell says an input is saved only
if the server confirmed its write-ahead (input-taken :saved), and the next
server's hello does not say it again."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "q1")
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken '(:type "input-taken" :saved t))
    (amacs-shell--on-disconnect)
    (should (string-match-p
             "amacs> q1\n;; The server stopped before the agent replied; your input is saved in agent-chat.org, not answered (M-p brings it back)\\. Send again"
             (amacs-shell-test--text)))
    (amacs-test-with-status '(:interrupted t :recent ((:human "q1")))
      (amacs-shell--greet))
    (should-not (string-match-p "got no reply" (amacs-shell-test--text)))
    (amacs-test-with-status '(:interrupted t :recent ((:human "q1")))
      (amacs-shell--greet))                       ; a later server: said again, once
    (should (string-match-p "got no reply" (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-resumed-exchanges-say-why-an-input-got-no-reply ()
  "A newcomer's finding: the resumed shell kept the inputs but not that one was interrupted."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:recent ((:human "please interrupt me" :status "no reply: interrupted by the person")
                                    (:human "after the interrupt" :agent "Here."))
                           :key-ok t)
      (amacs-shell--greet))
    (should (string-match-p
             "amacs> please interrupt me\n;; (no reply: interrupted by the person)\namacs> after the interrupt\n\nHere\."
             (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-a-reply-shown-is-said-to-be-kept ()
  "Issue 12: the server writes a reply before it shows it: a turn cut after it keeps both."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "q1")
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken '(:type "input-taken" :saved t))
    (amacs-shell--on-reply '(:text "an answer"))
    (amacs-shell--on-disconnect)
    (should (string-match-p "your input and the reply shown are saved in agent-chat.org"
                            (amacs-shell-test--text)))
    (should-not (string-match-p "before the agent replied" (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-an-input-not-saved-is-in-the-history ()
  "Issue 12: input given to an agent that asked is not in agent-chat.org: M-p, not \"saved\".
After a turn that ended nothing is said about it."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "for the task")
    (amacs-shell--on-input-taken '(:type "input-taken" :saved nil))
    (amacs-shell--on-disconnect)
    (should (string-match-p "your input went to the agent that asked, not to agent-chat.org: M-p brings it back"
                            (amacs-shell-test--text)))
    (should-not (string-match-p "saved in agent-chat" (amacs-shell-test--text))))
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "q1")
    (amacs-shell--on-input-taken '(:type "input-taken" :saved t))
    (amacs-shell--on-turn-done nil)
    (amacs-shell--on-disconnect)
    (should-not (string-match-p "server stopped" (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-one-notice-when-the-server-stops ()
  "A newcomer saw two notices that said nearly the same, and the log path on a
line without `;;': the server stopped mid-turn is one notice, what happened,
what is on disk and how to go on, then `;; Log: PATH'."
  (amacs-shell-test--with-shell
    (let ((said nil))
      (let ((amacs-transport-message-function (lambda (text) (push text said) (amacs-shell--note text)))
            (amacs-disconnect-hook '(amacs-shell--on-disconnect)))
        (amacs-shell-test--type-and-send "q1")
        (amacs-shell--on-turn-start nil)
        (amacs-shell--on-input-taken '(:type "input-taken" :saved t))
        (amacs--say-stopped (amacs-current-connection) "AMACS server stopped (killed)"
                            "Send a message to restart it, or M-x amacs-restart.\nLog: /home/x/logs/server.log"))
      (should-not said)                               ; the shell said it: the transport adds nothing
      (let ((text (amacs-shell-test--text)))
        (should (string-match-p
                 (concat "amacs> q1\n;; AMACS server stopped (killed) before the agent replied; your input is saved "
                         "in agent-chat\\.org, not answered (M-p brings it back)\\. Send a message to restart it, "
                         "or M-x amacs-restart\\.\n"
                         ";; Log: /home/x/logs/server\\.log\n")
                 text))
        (should (= 1 (how-many "stopped" (point-min) (point-max))))))))

;; CI once saw the server killed just after it said it took and saved the
;; input: the connection's events waited for their timer, the sentinel ran
;; first, and the notice left out that the input is saved.
(ert-deftest amacs-shell-test-events-before-the-stop-are-handled-before-it ()
  "Events that came before the connection closed count in the stop's notice."
  (amacs-shell-test--with-shell
    (let ((conn (amacs-current-connection))
          (amacs-transport-message-function #'amacs-shell--note)
          (amacs-disconnect-hook '(amacs-shell--on-disconnect)))
      (amacs-shell-test--type-and-send "q1")
      (amacs--queue-events conn '((:type "input-taken" :saved t) (:type "turn-start")))
      (should (amacs-wire-drain-timer (amacs-connection-wire conn)))      ; not yet handled: the timer waits
      (let ((timer (amacs-wire-drain-timer (amacs-connection-wire conn))))
        (amacs--say-stopped conn "AMACS server stopped (killed)" "Send a message to restart it.")
        (should-not (amacs-wire-queue (amacs-connection-wire conn)))
        (should-not (memq timer timer-list)))
      (should (string-match-p
               (concat "amacs> q1\n;; AMACS server stopped (killed) before the agent replied; "
                       "your input is saved in agent-chat\\.org, not answered (M-p brings it back)\\. Send a message to restart it\\.")
               (amacs-shell-test--text))))))

;; A newcomer's tmux findings: C-c C-d (comint's EOF) ended the shell for
;; good; RET on a past input sent it again with its prompt ("amacs> task").
(ert-deftest amacs-shell-test-comint-signals-do-not-end-the-shell ()
  "C-c C-d and the Signals menu's commands leave the shell working; a gone placeholder comes back."
  (amacs-shell-test--with-shell
    (let ((proc (get-buffer-process (current-buffer))))
      (dolist (keys '("C-c C-d" "C-c C-\\" "C-c C-z"))
        (let ((command (key-binding (kbd keys))))
          (when (commandp command) (call-interactively command))))
      (should (eq proc (get-buffer-process (current-buffer))))
      (should (process-live-p proc))
      ;; However it went (a kill, a crash), the next RET brings it back and sends.
      (delete-process proc)
      (should-not (string-match-p "Process" (amacs-shell-test--text)))
      (goto-char (point-max))
      (insert "and now")
      (amacs-shell-return)
      (should (process-live-p (get-buffer-process (current-buffer))))
      (should (equal (mapcar #'cadr amacs-shell-test--calls) '(("and now")))))))

(ert-deftest amacs-shell-test-ret-on-a-past-input-puts-it-at-the-prompt ()
  "RET on a past input (or its prompt) puts it, without the prompt, at the prompt; it sends nothing.
A draft at the prompt goes to the kill ring.  RET on a reply's text sends nothing."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "task")
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply '(:type "reply" :text "Done the task."))
    (amacs-shell--on-turn-done '(:type "turn-done" :tick 2))
    (setq amacs-shell-test--calls nil)
    (goto-char (point-max))
    (insert "my draft")
    (dolist (at '("task" "amacs> task"))
      (goto-char (point-min))
      (search-forward at)
      (backward-char 1)
      (amacs-shell-return)
      (should (string-suffix-p "\namacs> task" (amacs-shell-test--text)))
      (should (= (point) (point-max))))
    (should (equal (current-kill 0 t) "task"))   ; the second RET replaced "task" itself
    (should (member "my draft" kill-ring))
    (goto-char (point-min))
    (search-forward "Done the")
    (amacs-shell-return)
    (should-not amacs-shell-test--calls)         ; nothing was sent
    (goto-char (point-max))
    (amacs-shell-return)
    (should (equal (mapcar #'cadr amacs-shell-test--calls) '(("task"))))))

;; A newcomer killed the shell (C-x k) while a reply streamed: every delta
;; after it failed ("Marker does not point anywhere"), and the new shell was empty.
(ert-deftest amacs-shell-test-killing-the-shell-mid-turn-asks-and-loses-nothing ()
  "Killing the shell mid-turn asks first; killed, the turn's events do nothing and a new shell works."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "tell me slowly")
    (amacs-shell--on-turn-start nil)
    (amacs-shell--on-input-taken '(:type "input-taken" :saved t))
    (amacs-shell--on-reply-delta '(:type "reply-delta" :text "Once upon"))
    (let ((asked nil))
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (question) (push question asked) nil)))
        (should-not (kill-buffer (current-buffer)))   ; answered no: the shell stays
        (should (string-match-p "working on your turn" (car asked)))
        (cl-letf (((symbol-function 'yes-or-no-p) (lambda (_q) t)))
          (should (kill-buffer (current-buffer))))))
    (let ((messages nil))
      (cl-letf (((symbol-function 'message) (lambda (&rest args) (push (apply #'format args) messages))))
        (amacs-shell--on-reply-delta '(:type "reply-delta" :text " a time"))
        (amacs-shell--on-reply '(:type "reply" :text "Once upon a time." :streamed t))
        (amacs-shell--on-turn-done '(:type "turn-done" :tick 3)))
      (should-not (seq-find (lambda (m) (string-match-p "failed" m)) messages)))
;; The turn goes on: a new shell shows the last exchanges, then the turn's stream
    ;; below them (its deltas wait for the exchanges), and does not call it stopped.
    (amacs-shell--on-turn-start nil)                 ; a next turn, going on without a shell
    (let ((status-callback nil)
          (conn (amacs-current-connection)))
      (cl-letf (((symbol-function 'amacs-call)
                 (lambda (method _args &optional callback _errback)
                   (when (eq method 'status) (setq status-callback callback)))))
        (set-window-buffer (selected-window) (amacs-shell))
        (should status-callback)
        (amacs--queue-events conn '((:type "reply-delta" :text "Still streaming")))
        (amacs--drain-events conn)
        (with-current-buffer amacs-shell-buffer-name
          (should-not (string-match-p "Still streaming" (amacs-shell-test--text))))   ; held
        (funcall status-callback '(:recent ((:human "tell me slowly")) :interrupted t))
        (when (timerp (amacs-wire-drain-timer (amacs-connection-wire conn)))
          (cancel-timer (amacs-wire-drain-timer (amacs-connection-wire conn)))))
      (with-current-buffer amacs-shell-buffer-name
        (let ((text (amacs-shell-test--text)))
          (should (string-match-p "amacs> tell me slowly\n\\(.*\n\\)*Still streaming" text))
          (should-not (string-match-p "no reply before the server stopped" text)))))))

;; A newcomer could not tell what the defaults of these prompts were.
(ert-deftest amacs-shell-test-set-budget-and-set-model-say-their-defaults ()
  "The budget prompt says the limit now and that RET doubles it; the backend prompt its default."
  (amacs-shell-test--with-shell
    (let ((prompts nil)
          (amacs-shell-usage '(:budget-limit 2.0)))
      (setf (amacs-wire-status (amacs-connection-wire (amacs-current-connection))) '(:backend "openai" :model "qwen"))
      (cl-letf (((symbol-function 'read-number) (lambda (prompt default) (push prompt prompts) default))
                ((symbol-function 'completing-read)
                 (lambda (prompt &rest _) (push prompt prompts) "openai"))
                ((symbol-function 'read-string) (lambda (prompt &rest _) (push prompt prompts) "")))
        (call-interactively #'amacs-set-budget)
        (call-interactively #'amacs-set-model))
      (should (equal (car (last prompts)) "Budget limit in dollars, now $2.00: "))
      (should (member "Backend (default openai): " prompts))
      (should (equal (cadr (assq 'set_budget (mapcar (lambda (c) (cons (car c) (cadr c)))
                                                      amacs-shell-test--calls)))
                     4.0)))))

;; A newcomer typed localhost:41317 as the base URL; the model calls then failed as if
;; the network were down.
(ert-deftest amacs-shell-test-set-model-asks-again-for-a-url-without-its-scheme ()
  "A base URL without http:// is asked for again, http:// put before it; none is sent."
  (amacs-shell-test--with-shell
    (let ((prompts nil)
          (answers (list "claude-x" "localhost:41317" "http://localhost:41317")))
      (setf (amacs-wire-status (amacs-connection-wire (amacs-current-connection))) '(:backend "anthropic" :model "claude-x"))
      (cl-letf (((symbol-function 'completing-read) (lambda (&rest _) "anthropic"))
                ((symbol-function 'read-string)
                 (lambda (prompt &optional initial &rest _)
                   (push (cons prompt initial) prompts)
                   (pop answers))))
        (call-interactively #'amacs-set-model))
      (should (equal (cadr prompts)
                     '("localhost:41317 is no URL (it starts with http:// or https://); Base URL: "
                       . "http://localhost:41317")))
      (should (equal (car prompts) '("Context window in tokens (empty: as its server says): ")))
      (should (equal (cdr (assq 'set_model (mapcar (lambda (c) (cons (car c) (cadr c)))
                                                    amacs-shell-test--calls)))
                     '("anthropic" "claude-x" "http://localhost:41317")))
      ;; Called from Lisp with such a URL: refused, and nothing is sent.
      (setq amacs-shell-test--calls nil)
      (should-error (amacs-set-model "anthropic" "claude-x" "localhost:41317") :type 'user-error)
      (should-not (assq 'set_model amacs-shell-test--calls)))))

;; LiteLLM reported its price list's window for the alias (1,000,000 tokens), not its model's.
(ert-deftest amacs-shell-test-set-model-takes-the-models-window ()
  "A window typed at the prompt goes to the server and to a restarted server's environment."
  (amacs-shell-test--with-shell
    (let ((answers (list "claude-sonnet-5-5" "http://127.0.0.1:4000" "lots" "8192")))
      (setf (amacs-wire-status (amacs-connection-wire (amacs-current-connection))) '(:backend "anthropic" :model "m"))
      (cl-letf (((symbol-function 'completing-read) (lambda (&rest _) "anthropic"))
                ((symbol-function 'read-string) (lambda (&rest _) (pop answers))))
        (call-interactively #'amacs-set-model))
      (should (equal (cdr (assq 'set_model (mapcar (lambda (c) (cons (car c) (cadr c)))
                                                    amacs-shell-test--calls)))
                     '("anthropic" "claude-sonnet-5-5" "http://127.0.0.1:4000" 8192)))
      (should-error (amacs-set-model "anthropic" "m" nil "8192") :type 'user-error))))

(ert-deftest amacs-shell-test-a-refused-input-is-the-one-marked-not-sent ()
  "The server refuses the second of two queued inputs: that one is marked not sent.
The first, which it accepted, stays queued until the agent takes it;
the oldest was marked, and the refused one later shown as taken."
  (amacs-shell-test--with-shell
    (cl-letf (((symbol-function 'amacs-call)
               (lambda (method args &optional _callback errback)
                 (push (list method args) amacs-shell-test--calls)
                 (when (and (eq method 'submit) (equal (car args) "the refused one") errback)
                   (funcall errback "1 inputs already wait for the agent")))))
      (amacs-shell-test--type-and-send "the accepted one")
      (amacs-shell-test--type-and-send "the refused one")
      (should (string-match-p "amacs> the refused one\n;; Not sent: 1 inputs already wait for the agent"
                              (amacs-shell-test--text)))
      (let ((queued (amacs-shell--footer-lines 'amacs-queued)))
        (should (equal (buffer-substring-no-properties (car queued) (cdr queued)) "amacs> the accepted one\n")))
      (amacs-shell--on-input-taken '(:saved t))
      (should-not (amacs-shell--footer-lines 'amacs-queued))
      (should (string-match-p "amacs> the refused one\n;; Not sent[^\n]*\n\\(.*\n\\)*amacs> the accepted one"
                              (amacs-shell-test--text))))))

(ert-deftest amacs-shell-test-a-raised-budget-puts-the-refused-input-back ()
  "Raised above the spend, the input the budget refused is back at the prompt, not sent.
A draft at the prompt goes to the kill ring; none, and the note does
not speak of one; no refused input, and the prompt is left alone."
  (amacs-shell-test--with-shell
    (let ((answer '(:limit 1.0 :refused "the refused question")) (kill-ring nil))
      (cl-letf (((symbol-function 'amacs-call)
                 (lambda (method args &optional callback &rest _)
                   (push (list method args) amacs-shell-test--calls)
                   (when callback (funcall callback answer))))
                ((symbol-function 'amacs-choose) #'ignore))
        (insert "half a new thought")
        (amacs-set-budget 1.0)
        (should (equal (amacs-shell--draft) "the refused question"))
        (should (equal (car kill-ring) "half a new thought"))
        (should (string-match-p
                 ";; The budget limit is now \\$1.00: your last input, which the budget stopped, is back at the prompt, not sent (RET sends it); what you had typed there is in the kill ring (C-y)."
                 (amacs-shell-test--text)))
        (should-not (assq 'submit amacs-shell-test--calls))      ; not sent
        (let ((inhibit-read-only t)) (delete-region (point-min) (point-max)) (amacs-shell--insert-prompt))
        (setq kill-ring nil)
        (amacs-set-budget 1.0)                                    ; an empty prompt
        (should (equal (amacs-shell--draft) "the refused question"))
        (should-not kill-ring)
        (should (string-match-p "is back at the prompt, not sent (RET sends it)\\.$" (amacs-shell-test--text)))
        (setq answer '(:limit 1.0 :refused nil))
        (let ((before (amacs-shell-test--text)))
          (amacs-set-budget 1.0)
          (should (equal (amacs-shell-test--text) before)))))))

(ert-deftest amacs-shell-test-a-narrow-header-keeps-what-the-agent-does ()
  "Too wide for the window, the header drops the backend, then the model, not the agent's doing."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:model "claude-sonnet-5-5" :backend "anthropic" :key-ok t)
      (amacs-shell--transition 'ready)
      (should (equal (amacs-shell-header-line 100) " claude-sonnet-5-5 (anthropic) — waiting for you"))
      (should (equal (amacs-shell-header-line 40) " claude-sonnet-5-5 — waiting for you"))
      (should (equal (amacs-shell-header-line 20) " waiting for you")))))

(ert-deftest amacs-shell-test-the-header-names-an-endpoint-that-is-not-the-providers ()
  "The header said claude-sonnet-5-5 (anthropic) while the agent talked to the demo on 127.0.0.1.
It names the endpoint whenever the server says it is not the provider's own.
The demo's short words are its long ones: a fork's header, which gets the
short words, said `demo' where its source's said `demo model'."
  (amacs-shell-test--with-shell
    (dolist (case '(((:model "demo" :backend "anthropic" :endpoint "demo") " demo model — waiting for you"
                     " demo model — waiting for you")
                    ((:model "smollm2" :backend "openai" :endpoint "local") " local: smollm2 — waiting for you"
                     " local: smollm2 — waiting for you")
                    ((:model "qwen" :backend "openai" :endpoint "gpu.example.org:8000")
                     " qwen (openai @ gpu.example.org:8000) — waiting for you"
                     " qwen @ gpu.example.org:8000 — waiting for you")))
      (amacs-test-with-status (append (car case) '(:key-ok t))
        (amacs-shell--transition 'ready)
        (should (equal (amacs-shell-header-line 100) (nth 1 case)))
        (should (equal (amacs-shell-header-line (length (nth 2 case))) (nth 2 case)))))))

(ert-deftest amacs-shell-test-a-local-models-header-says-it-reads-the-prompt ()
  "A newcomer on ./amacs --local saw \"thinking… 376s\" for six minutes while llama.cpp
read a long prompt, which its log knew.  The header says what the log says it does."
  (amacs-shell-test--with-shell
    (let* ((home (amacs-connection-home (amacs-current-connection)))
           (log (expand-file-name "logs/local-model.log" home))
           (started "INFO:     Application startup complete.\nINFO:     127.0.0.1:1 - \"GET /v1/models HTTP/1.1\" 200 OK\n")
           (done "llama_perf_context_print: prompt eval time =  40764.57 ms /  1058 tokens\n"))
      (make-directory (file-name-directory log) t)
      (unwind-protect
          (amacs-test-with-status '(:model "smollm2" :backend "openai" :endpoint "local" :key-ok t)
            (amacs-shell--transition 'ready)
            (amacs-shell--enter (amacs-shell--turn) 'thinking)
            (setf (amacs-shell-turn-since (amacs-shell--turn)) (- (float-time) 61))
            (dolist (case `((,started "thinking… 61s, llama.cpp reads the whole prompt first")
                            (,(concat started done) "thinking… 61s")
                            (,(concat started done "Llama.generate: 1708 prefix-match hit, remaining 2970 prompt tokens to eval\n")
                             "thinking… 61s, llama.cpp reads 2970 prompt tokens first")
                            (,(concat started "Llama.generate: 9 prefix-match hit, remaining 12 prompt tokens to eval\n" done)
                             "thinking… 61s")))
              (with-temp-file log (insert (car case)))
              (should (string-prefix-p (cadr case) (amacs-shell-state-string))))
            ;; The header is drawn at every redisplay: an unchanged log is not read again.
            (let ((reads 0))
              (cl-letf* ((read (symbol-function 'insert-file-contents-literally))
                         ((symbol-function 'insert-file-contents-literally)
                          (lambda (&rest args) (setq reads (1+ reads)) (apply read args))))
                (amacs-shell-state-string)
                (amacs-shell-state-string))
              (should (= reads 0)))
            (amacs-test-with-status '(:model "claude-x" :backend "anthropic" :key-ok t)
              (with-temp-file log (insert started))
              (should (equal "thinking… 61s" (amacs-shell-state-string)))))
        (delete-file log)))))

(ert-deftest amacs-shell-test-a-forks-header-says-whose-fork-it-is-opened-alone-too ()
  "A fork opened alone (its own ./amacs, or M-x amacs-shell on its home) had a header
with no home in it, the same as its parent's.  It names the fork's home and what it
is a fork of."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:model "claude-x" :backend "anthropic" :key-ok t
                              :fork (:from "/tmp/parent-home" :tick 3))
      (amacs-shell--transition 'ready)
      (should (equal (amacs-shell-header-line 200)
                     (format " %s (a fork of /tmp/parent-home at tick 3) — claude-x (anthropic) — waiting for you"
                             (amacs-connection-name)))))
    (amacs-test-with-status '(:model "claude-x" :backend "anthropic" :key-ok t)
      (should (equal (amacs-shell-header-line 200) " claude-x (anthropic) — waiting for you")))))

(ert-deftest amacs-shell-test-a-forks-header-names-the-commit-it-was-forked-from ()
  "A rewind of the parent uses its tick numbers again: \"a fork of HOME at tick 3\"
could name another mind later.  Wide enough, the header names the tick's commit
too; narrower, the commit goes first."
  (amacs-shell-test--with-shell
    (cl-letf (((symbol-function 'amacs-connection-name) (lambda (&rest _) "/tmp/x/home-fork-now")))
      (amacs-test-with-status '(:model "demo" :backend "anthropic" :endpoint "demo" :key-ok t
                                :fork (:from "/tmp/x/home/" :tick 3
                                       :commit "e8a1cf1d2c3b4a5968778695a4b3c2d1e0f1a2b3"))
        (amacs-shell--transition 'ready)
        (dolist (width '((200 " /tmp/x/home-fork-now (a fork of /tmp/x/home at tick 3, commit e8a1cf1) — demo model — waiting for you")
                         ;; A longer path than the terminal's width allows: the fork's own
                         ;; folder stays with the commit, as docs/shell.md shows it.
                         (95 " home-fork-now (a fork of /tmp/x/home at tick 3, commit e8a1cf1) — demo model — waiting for you")
                         (86 " /tmp/x/home-fork-now (a fork of /tmp/x/home at tick 3) — demo model — waiting for you")))
          (should (equal (list (car width) (amacs-shell-header-line (car width))) width)))))))

(ert-deftest amacs-shell-test-a-narrow-forks-header-keeps-its-model ()
  "Side by side (60 columns) a fork's header read \" /tmp/x/home-fork-now (fork) — waiting
for you\": the model went first, while the original's kept it, just when the person asks
whether the fork runs on the same model.  Narrower, the words go by need: the backend,
the paths (their folder names stay), what it is a fork of, that it is a fork, the model;
what the agent does stays."
  (amacs-shell-test--with-shell
    (cl-letf (((symbol-function 'amacs-connection-name) (lambda (&rest _) "/tmp/x/home-fork-now")))
      (dolist (case '(((:model "demo" :backend "anthropic" :endpoint "demo")
                       (200 " /tmp/x/home-fork-now (a fork of /tmp/x/home at tick 3) — demo model — waiting for you")
                       (86 " /tmp/x/home-fork-now (a fork of /tmp/x/home at tick 3) — demo model — waiting for you")
                       (81 " /tmp/x/home-fork-now (a fork of home at tick 3) — demo model — waiting for you")
                       (76 " home-fork-now (a fork of home at tick 3) — demo model — waiting for you")
                       (60 " home-fork-now (fork) — demo model — waiting for you")
                       (40 " a fork — demo model — waiting for you")
                       (30 " demo model — waiting for you")
                       (20 " waiting for you"))
                      ((:model "claude-sonnet-5-5" :backend "anthropic")
                       (60 " home-fork-now (fork) — claude-sonnet-5-5 — waiting for you")
                       (40 " claude-sonnet-5-5 — waiting for you")
                       (30 " a fork — waiting for you"))))
        (amacs-test-with-status (append (car case) '(:key-ok t :fork (:from "/tmp/x/home/" :tick 3)))
          (amacs-shell--transition 'ready)
          (dolist (width (cdr case))
            (should (equal (list (car width) (amacs-shell-header-line (car width))) width))
            (should (<= (string-width (cadr width)) (car width)))))))))

(ert-deftest amacs-shell-test-a-header-beside-another-window-fits-left-of-the-divider ()
  "A terminal gives the last column of a window with another to its right to the
line between them: a header as wide as the window lost its last letter there."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:model "claude-sonnet-5-5" :backend "anthropic" :key-ok t)
      (amacs-shell--transition 'ready)
      (let ((whole " claude-sonnet-5-5 (anthropic) — waiting for you"))
        (split-window-right)
        (window-resize nil (- (string-width whole) (window-total-width)) t)
        (unwind-protect
            (progn
              (should (= (window-total-width) (string-width whole)))
              (should (equal (amacs-shell-header-line) " claude-sonnet-5-5 — waiting for you"))
              (enlarge-window-horizontally 1)
              (should (equal (amacs-shell-header-line) whole)))
          (delete-other-windows))))))

(ert-deftest amacs-shell-test-a-narrow-header-of-one-of-several-homes-keeps-the-model ()
  "With two homes open side by side, each header names its home; narrower, the
home's folder name stays before the model goes."
  (amacs-shell-test--with-shell
    (cl-letf (((symbol-function 'amacs-connection-name) (lambda (&rest _) "/tmp/x/a-rather-long-home"))
              ((symbol-function 'amacs-live-connections) (lambda (&rest _) '(one two))))
      (amacs-test-with-status '(:model "demo" :backend "anthropic" :endpoint "demo" :key-ok t)
        (amacs-shell--transition 'ready)
        (dolist (width '((60 " /tmp/x/a-rather-long-home — demo model — waiting for you")
                         (50 " a-rather-long-home — demo model — waiting for you")
                         (40 " demo model — waiting for you")
                         (20 " waiting for you")))
          (should (equal (list (car width) (amacs-shell-header-line (car width))) width)))))))

(ert-deftest amacs-shell-test-the-header-says-which-tick-of-the-step-limit-the-turn-is-on ()
  "A multi-tick turn showed no progress: the header counts its ticks until the turn ends."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:model "claude-x" :backend "anthropic" :key-ok t)
      (amacs-shell--transition 'ready)
      (amacs-shell--on-turn-start nil)
      (amacs-shell--on-step '(:step 1 :limit 8))
      (should (string-match-p "thinking… · tick 1 of 8" (amacs-shell-header-line 200)))
      (amacs-shell--transition 'eval-start "primary")
      (amacs-shell--on-step '(:step 3 :limit 8))
      (should (string-match-p "running an eval….* · tick 3 of 8" (amacs-shell-header-line 200)))
      (amacs-shell--transition 'turn-done)
      (should (equal (amacs-shell-header-line 200) " claude-x (anthropic) — waiting for you")))))

(ert-deftest amacs-shell-test-changed-settings-go-to-the-server-before-the-next-input ()
  "`amacs-max-steps' set while the server ran waited for a restart: hello alone sent it.
The settings go again, before the input, when they changed since the
server was last told; not when they did not."
  (amacs-shell-test--with-shell
    (let ((sync nil))
      (cl-letf (((symbol-function 'amacs--call-sync)
                 (lambda (method args) (push (list method args) sync) t)))
        (let ((amacs-max-steps 8))
          (setf (amacs-wire-settings-sent (amacs-connection-wire (amacs-current-connection))) (amacs--settings))
          (amacs-shell-test--type-and-send "one")
          (should-not sync)
          (setq amacs-max-steps 3)
          (amacs-shell-test--type-and-send "two")
          (should (equal (length sync) 1))
          (should (eq (car (car sync)) 'settings))
          (should (equal (plist-get (car (cadr (car sync))) :max-steps) 3))
          (amacs-shell-test--type-and-send "three")
          (should (equal (length sync) 1))
          (should (equal (mapcar #'car (reverse amacs-shell-test--calls)) '(submit submit submit))))))))

(ert-deftest amacs-shell-test-a-stop-with-nothing-in-flight-is-one-note ()
  "Nothing of a turn in flight: the transport's notice alone, every line a `;;' line."
  (amacs-shell-test--with-shell
    (let ((amacs-transport-message-function #'amacs-shell--note)
          (amacs-disconnect-hook '(amacs-shell--on-disconnect)))
      (amacs--say-stopped (amacs-current-connection) "AMACS server stopped (killed)"
                          "Send a message to restart it, or M-x amacs-restart.\nLog: /home/x/logs/server.log"))
    (should (string-match-p (concat ";; AMACS server stopped (killed)\\. Send a message to restart it, "
                                    "or M-x amacs-restart\\.\n;; Log: /home/x/logs/server\\.log\n")
                            (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-input-waiting-for-the-next-server-survives-a-disconnect ()
  "Issue 9/10: input sent to the server that went is not sent; input typed after, for the next one, stays."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "q1")                     ; handed to the server
    (let ((waiting nil))
      (cl-letf (((symbol-function 'amacs-when-ready) (lambda (fn) (push fn waiting))))
        (amacs-shell-test--type-and-send "q2"))               ; the connection is gone: it waits
      (amacs-shell--on-disconnect)
      (should (string-match-p "amacs> q1\n;; The server stopped before it said it had saved" (amacs-shell-test--text)))
      (should (eq (amacs-shell-test--face-at "amacs> q2") 'amacs-shell-queued))
      (should amacs-shell-busy)                                ; q2 is still on its way
      (mapc #'funcall waiting)                                 ; the next server is ready: q2 is sent
      (should (equal (cadr (car amacs-shell-test--calls)) '("q2")))
      (amacs-shell--on-input-taken nil)
      (should-not (eq (amacs-shell-test--face-at "amacs> q2") 'amacs-shell-queued)))))

(ert-deftest amacs-shell-test-interrupt-before-the-server-is-ready ()
  "Issue 9: C-c C-c while the server starts drops the waiting input and says so."
  (amacs-shell-test--with-shell
    (let ((waiting nil))
      (cl-letf (((symbol-function 'amacs-live-p) (lambda (&rest _) nil))
                ((symbol-function 'amacs-when-ready) (lambda (fn) (push fn waiting)))
                ((symbol-function 'amacs-cancel-waiting)
                 (lambda () (prog1 (length waiting) (setq waiting nil)))))
        (amacs-shell-test--type-and-send "do not run")
        (should (= (length waiting) 1))
        (amacs-shell-interrupt)
        (should (null waiting))
        (should-not amacs-shell-busy)
        (should (string-match-p "amacs> do not run\n;; Not sent: interrupted before the server was ready"
                                (amacs-shell-test--text)))))))

(ert-deftest amacs-shell-test-subagents-show-one-line-each ()
  "Issue 9: working subagents show in the footer, one updating line each."
  (amacs-shell-test--with-shell
    (insert "draft")
    (amacs-shell--on-agents '(:agents ((:id "task-1" :template "researcher" :doing "thinking (step 1)"))))
    (should (string-match-p "⟳ task-1 (researcher): thinking (step 1)\namacs> draft\\'"
                            (amacs-shell-test--text)))
    (amacs-shell--on-reply '(:text "Meanwhile, a reply."))
    (should (string-match-p "Meanwhile, a reply.\n\n⟳ task-1" (amacs-shell-test--text)))
    (amacs-shell--on-agents
     (list :agents (mapcar (lambda (i) (list :id (format "task-%d" i) :template "researcher" :doing "thinking"))
                           (number-sequence 1 6))))
    (should (string-match-p "task-4 (researcher): thinking\n⟳ and 2 more (C-c C-v lists them)\namacs> draft\\'"
                            (amacs-shell-test--text)))
    (should-not (string-match-p "task-5" (amacs-shell-test--text)))
    (amacs-shell--on-agents '(:agents nil))
    (should-not (string-match-p "task-1" (amacs-shell-test--text)))
    (should (string-suffix-p "amacs> draft" (amacs-shell-test--text)))))

;;;; Eval lines and confirmation

(defun amacs-shell-test--eval (form &optional answer)
  "Run FORM as the agent's eval; y-or-n-p answers ANSWER.  Return the reply sent."
  (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) answer)))
    (amacs--handle-eval-event (list :type "eval" :id 7 :form form :agent "primary")))
  (cadr (cadr (seq-find (lambda (c) (eq (car c) 'emacs_reply)) amacs-shell-test--calls))))

(ert-deftest amacs-shell-test-eval-line-expands-to-form-and-result ()
  "Issue 9: each eval shows as a line; TAB shows its form and result."
  (amacs-shell-test--with-shell
    (let ((amacs-eval-confirm nil))
      (should (equal (amacs-shell-test--eval "(+ 2 2)") '(:success t :result "4"))))
    (should (string-match-p "▸ eval (\\+ 2 2) → 4\n" (amacs-shell-test--text)))
    (goto-char (point-min))
    (search-forward "▸ eval")
    (let ((detail (save-excursion (search-forward "⇒ 4") (match-beginning 0))))
      (should (invisible-p detail))
      (amacs-shell-tab)
      (should-not (invisible-p detail))
      (should (string-match-p "^▾ eval (\\+ 2 2) → 4\n" (amacs-shell-test--text))) ; shown: the arrow points down
      (should (get-text-property (line-beginning-position) 'amacs-eval))
      (amacs-shell-toggle)
      (should (invisible-p detail))
      (should (string-match-p "^▸ eval (\\+ 2 2) → 4\n" (amacs-shell-test--text))))))

(ert-deftest amacs-shell-test-thinking-is-a-folded-line-above-the-reply ()
  "The model's thinking streams into one folded line before its reply; TAB shows it."
  (amacs-shell-test--with-shell
    (amacs-shell--on-thinking-delta '(:type "thinking-delta" :text "Two and two "))
    (amacs-shell--on-thinking-delta '(:type "thinking-delta" :text "make four."))
    (amacs-shell--on-reply-delta '(:type "reply-delta" :text "4"))
    (amacs-shell--on-reply '(:type "reply" :text "4" :streamed t))
    (let ((text (amacs-shell-test--text)))
      (should (string-match-p "▸ thinking\nTwo and two make four.\n\\(.\\|\n\\)*4" text))
      (should (= 1 (cl-count-if (lambda (l) (string-prefix-p "▸ thinking" l)) (split-string text "\n")))))
    (goto-char (point-min))
    (search-forward "Two and two")
    (let ((detail (match-beginning 0)))
      (should (invisible-p detail))
      (goto-char (point-min))
      (search-forward "▸ thinking")
      (amacs-shell-tab)
      (should-not (invisible-p detail))
      (should (string-match-p "^▾ thinking" (amacs-shell-test--text)))
      (amacs-shell-toggle)
      (should (invisible-p detail)))
    (amacs-shell--on-thinking-delta '(:type "thinking-delta" :text "next tick"))
    (should (= 2 (cl-count-if (lambda (l) (string-prefix-p "▸ thinking" l))
                              (split-string (amacs-shell-test--text) "\n"))))))

(ert-deftest amacs-shell-test-failed-eval-line-is-an-error ()
  "Issue 9: an eval that signals shows its error in the error face."
  (amacs-shell-test--with-shell
    (let ((amacs-eval-confirm nil))
      (amacs-shell-test--eval "(car 1)"))
    (should (string-match-p "▸ eval (car 1) → error: Wrong type argument" (amacs-shell-test--text)))
    (should (eq (amacs-shell-test--face-at "▸ eval (car 1)") 'amacs-shell-eval-error))))

(ert-deftest amacs-shell-test-memory-addresses-show-without-their-eot-marks ()
  "A newcomer read `:mem-id \"<EOT>amacs-instance-1:primary:thread.demo-tour:1<EOT>\"' in the
demo's first eval result: the marks are the agent's, which gets them back as they were."
  (amacs-shell-test--with-shell
    (let ((amacs-eval-confirm nil))
      (should (equal (amacs-shell-test--eval "(list :mem-id \"<EOT>a:primary:x:1<EOT>\" :n 1)")
                     '(:success t :result "(:mem-id \"<EOT>a:primary:x:1<EOT>\" :n 1)")))
      (should (string-match-p "▸ eval (list :mem-id \"a:primary:x:1\" :n 1) → (:mem-id \"a:primary:x:1\" :n 1)\n"
                              (amacs-shell-test--text)))
      (should (string-match-p "⇒ (:mem-id \"a:primary:x:1\" :n 1)" (amacs-shell-test--text)))
      (setq amacs-shell-test--calls nil)
      (amacs-shell-test--eval "(error \"No item <EOT>a:primary:y:2<EOT>\")")
      (should-not (string-search "<EOT>" (amacs-shell-test--text))))))

(ert-deftest amacs-shell-test-eval-lines-are-refitted-when-the-window-narrows ()
  "After M-x amacs-fork split the frame, the first shell's eval lines, cut for the whole width,
wrapped over two or three lines each in its half.  Refitted, each keeps one line, and its arrow."
  (amacs-shell-test--with-shell
    (delete-other-windows)
    (let ((amacs-eval-confirm nil)
          (lines (lambda ()
                   (seq-filter (lambda (line) (string-match-p "^[▸▾] eval" line))
                               (split-string (amacs-shell-test--text) "\n")))))
      (should (memq #'amacs-shell--refit window-size-change-functions))
      (amacs-shell-test--eval (format "(list %S %S)" (make-string 70 ?a) (make-string 70 ?b)))
      (amacs-shell-test--eval "(make-string 90 ?c)")
      (goto-char (point-min))
      (search-forward "▸ eval (make-string")
      (amacs-shell-toggle)              ; shown: ▾
      (let ((wide (funcall lines)))
        (should (= (length wide) 2))
        (should (> (string-width (car wide)) 60))
        (split-window-right 50)           ; as the 100-column terminal of the newcomer, halved
        (amacs-shell--refit (selected-window))
        (let ((narrow (funcall lines))
              (width (window-body-width)))
          (should (= (length narrow) 2))
          (dolist (line narrow) (should (< (string-width line) width)))
          (should (string-prefix-p "▾ eval (make-string" (cadr narrow))))
        (delete-other-windows)
        (amacs-shell--refit (selected-window))
        (should (equal (funcall lines) wide))))))

(ert-deftest amacs-shell-test-eval-confirm-accept-and-decline ()
  "Issue 9: `amacs-eval-confirm' asks; yes runs, no is the agent's error result.
While it asks, the header says so, not that the eval runs (a newcomer's finding)."
  (amacs-shell-test--with-shell
    (let ((amacs-eval-confirm t) (header nil))
      (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) (setq header (amacs-shell-header-line)) t)))
        (amacs--handle-eval-event (list :type "eval" :id 6 :form "(+ 1 1)" :agent "primary")))
      (should (string-match-p "asks you whether an eval may run" header))
      (setq amacs-shell-test--calls nil)
      (should (equal (amacs-shell-test--eval "(+ 1 2)" t)
                     '(:success t :result "3" :decisions ((:action "eval" :target nil :allowed t)))))
      (should (equal (mapcar #'cadr (seq-filter (lambda (c) (eq (car c) 'eval_hold)) amacs-shell-test--calls))
                     '((7 nil) (7 t))))
      (setq amacs-shell-test--calls nil)
      (should (equal (amacs-shell-test--eval "(kill-emacs)" nil)
                     (list :success nil :error "the person declined this eval"
                           :decisions '((:action "eval" :target nil :allowed :false)))))))
  (amacs-shell-test--with-shell
    (let ((amacs-eval-confirm (lambda (form _agent) (string-match-p "delete" form)))
          (asked nil))
      (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) (setq asked t) nil)))
        (amacs--handle-eval-event '(:type "eval" :id 8 :form "(+ 1 1)")))
      (should-not asked)
      (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) (setq asked t) nil)))
        (amacs--handle-eval-event '(:type "eval" :id 9 :form "(delete-file \"x\")")))
      (should asked))))

(ert-deftest amacs-shell-test-eval-confirm-writes-asks-before-processes-and-writes-only ()
  "`amacs-eval-confirm' `writes' asks before a process starts or a file is written, once each
per eval, and not about computing or editing a buffer; each answer is in the result."
  (amacs-shell-test--with-shell
    (let ((amacs-eval-confirm 'writes) (asked nil) (file (make-temp-file "amacs-writes")))
      (cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (push prompt asked) nil)))
        (amacs--handle-eval-event '(:type "eval" :id 11 :agent "primary"
                                    :form "(with-temp-buffer (insert \"x\") (* 6 7))")))
      (should-not asked)
      (setq amacs-shell-test--calls nil)
      (should (equal (amacs-shell-test--eval "(call-process \"true\")" nil)
                     '(:success nil :error "The person declined to let this eval run true"
                       :decisions ((:action "run" :target "true" :allowed :false)))))
      (setq amacs-shell-test--calls nil)
      (let ((reply (amacs-shell-test--eval (format "(progn (write-region \"1\" nil %S) (write-region \"2\" nil %S) 'ok)"
                                                   file file)
                                           t)))
        (should (equal (plist-get reply :result) "ok"))
        (should (equal (length (plist-get reply :decisions)) 1)))
      (should (equal (with-temp-buffer (insert-file-contents file) (buffer-string)) "2"))
      (delete-file file))))

(ert-deftest amacs-shell-test-the-changed-line-counts-lines-gained-and-lost ()
  "The turn's line: a name each, its kind, and the lines it gained and lost."
  (let ((buffer (amacs-changes--counted 'buffer "notes" nil "a\n" "a\nb\n"))
        (file (amacs-changes--counted 'file "~/x.py" nil "a\nb\nc\n" "a\nB\nc\nd\ne\n"))
        (new (amacs-changes--counted 'file "~/n.org" nil nil "one\ntwo\n")))
    (should-not (amacs-changes--counted 'buffer "same" nil "a" "a"))
    (should (equal (amacs-changes-line (list buffer file new))
                   "▸ changed: notes (buffer, +1 line), ~/x.py (file, +3 −1), ~/n.org (new file, +2 lines)"))))

(defconst amacs-shell-test--readme
  (expand-file-name "../../README.md" (file-name-directory (or load-file-name buffer-file-name)))
  "The README, whose key table names the shell's keys.")

(ert-deftest amacs-shell-test-the-readme-key-table-names-every-key-of-the-shell ()
  "C-j sent but was not in the key table: every key the shell binds itself is there."
  (let ((table (with-temp-buffer
                 (insert-file-contents amacs-shell-test--readme)
                 (buffer-string)))
        (missing nil))
    (cl-labels ((own (map prefix)
                  ;; The shell's own bindings: comint's, inherited as the keymap's parent, left out.
                  (let ((copy (copy-keymap map)))
                    (set-keymap-parent copy nil)
                    (map-keymap
                     (lambda (event binding)
                       (let ((keys (vconcat prefix (vector event))))
                         (cond ((eq event 'remap))
                               ((keymapp binding) (own binding keys))
                               ((memq binding '(undefined amacs-shell-delete-char)))
                               (t (let* ((key (key-description keys))
                                         (shown (pcase key ("S-<return>" "S-RET") ("<backtab>" "S-TAB") (_ key))))
                                    (unless (string-match-p (regexp-quote (concat "`" shown "`")) table)
                                      (push key missing)))))))
                     copy))))
      (own amacs-shell-mode-map []))
    (should-not missing)))

(ert-deftest amacs-shell-test-comint-keys-that-delete-output-are-off-and-c-u-kills-the-input ()
  "Inherited comint keys were live and unexplained: C-c C-o and C-c M-o deleted the
conversation; C-c C-u (delete the input) is kept, and documented."
  (amacs-shell-test--with-shell
    (should (eq (key-binding (kbd "C-c C-o")) 'amacs-shell-keep-conversation))
    (should (eq (key-binding (kbd "C-c M-o")) 'amacs-shell-keep-conversation))
    (amacs-shell--output "A reply.")
    (goto-char (point-max))
    (insert "half typed")
    (let ((before (amacs-shell-test--text)))
      (call-interactively (key-binding (kbd "C-c C-o")))
      (call-interactively (key-binding (kbd "C-c M-o")))
      (should (equal (amacs-shell-test--text) before)))
    (call-interactively (key-binding (kbd "C-c C-u")))
    (should (string-suffix-p "A reply.\namacs> " (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-a-restart-says-the-servers-notice-once ()
  "After M-x amacs-restart the local model's note was printed twice: by the shell's
greeting and by the line saying the server restarted."
  (amacs-shell-test--with-shell
    (let ((amacs-transport-message-function #'amacs-shell--note))
      (amacs-test-with-status '(:model "smollm2" :backend "openai" :key-ok t
                                :notice "Local model: for trying AMACS, not for real work.")
        (amacs-shell--greet)
        (amacs--restarted t)
        (let ((text (amacs-shell-test--text)))
          (should (string-match-p "AMACS server restarted: smollm2 on openai\\." text))
          (should (= (cl-count-if (lambda (line) (string-match-p "Local model: for trying" line))
                                  (split-string text "\n"))
                     1)))))))

(ert-deftest amacs-shell-test-files-an-eval-writes-or-deletes-are-listed-with-no-primitive-advised ()
  "Keeping a file's bytes by advising `write-region' compiled a trampoline at the first eval
of each session (about a second before the demo's first reply went on; every session under
EMACS_INHIBIT_AUTOMATIC_NATIVE_COMPILATION).  The eval's file name handler sees the writes,
also from compiled code (`save-buffer'), and the deletes."
  (amacs-shell-test--with-shell
    (let* ((amacs-eval-confirm nil)
           (dir (make-temp-file "amacs-changes" t))
           (kept (expand-file-name "kept.org" dir))
           (gone (expand-file-name "gone.org" dir)))
      (unwind-protect
          (progn
            (with-temp-file kept (insert "one\n"))
            (with-temp-file gone (insert "a\nb\n"))
            (should (equal (plist-get (amacs-shell-test--eval
                                       (format "(progn (with-current-buffer (find-file-noselect %S) (goto-char (point-max)) (insert \"two\\n\") (save-buffer) (kill-buffer)) (delete-file %S) 'ok)"
                                               kept gone))
                                      :result)
                           "ok"))
            (amacs-changes--on-turn-done nil)
            (should (string-match-p (regexp-quote (format "▸ changed: %s (file, +1 line), %s (file deleted, −2 lines)"
                                                          (abbreviate-file-name kept) (abbreviate-file-name gone)))
                                    (amacs-shell-test--text)))
            ;; S-TAB from the prompt stops on the ▸ changed line (a newcomer could not reach the one
            ;; line whose RET offers an undo by TAB), then on the eval above it; TAB comes back.
            (goto-char (point-max))
            (amacs-shell-previous-eval 1)
            (should (looking-at "▸ changed: "))
            (amacs-shell-previous-eval 1)
            (should (looking-at "▸ eval (progn"))
            (amacs-shell-next-eval 1)
            (should (looking-at "▸ changed: "))
            (dolist (primitive '(write-region delete-file))
              (advice-mapc (lambda (advice _) (should-not advice)) primitive)))
        (delete-directory dir t)))))

(ert-deftest amacs-shell-test-eval-confirm-writes-asks-about-files-with-no-file-primitive-advised ()
  "`writes' advised 7 primitives, so 7 trampolines were compiled at its first eval of each
session, and a link onto a file was never asked about.  The eval's file name handler asks about
every write, copy, rename, link and delete, also from compiled code (`save-buffer'); only the
three process starts are advised."
  (amacs-shell-test--with-shell
    (let* ((amacs-eval-confirm 'writes)
           (asked nil)
           (dir (make-temp-file "amacs-writes" t))
           (kept (expand-file-name "kept.txt" dir))
           (link (expand-file-name "link.txt" dir))
           (eval (lambda (form answer)
                   (setq amacs-shell-test--calls nil)
                   (cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (push prompt asked) answer)))
                     (amacs--handle-eval-event (list :type "eval" :id 7 :form form :agent "primary")))
                   (cadr (cadr (seq-find (lambda (c) (eq (car c) 'emacs_reply)) amacs-shell-test--calls))))))
      (unwind-protect
          (progn
            (with-temp-file kept (insert "one\n"))
            (should (equal (plist-get (funcall eval (format "(progn (with-current-buffer (find-file-noselect %S) (insert \"0\") (save-buffer) (kill-buffer)) (add-name-to-file %S %S) 'ok)"
                                                            kept kept link)
                                               t)
                                      :result)
                           "ok"))
            (should (equal (length asked) 2))
            (should (string-match-p "wants to link to .*link\\.txt" (car asked)))
            (should (string-match-p "wants to write .*kept\\.txt" (cadr asked)))
            (should (equal (plist-get (funcall eval (format "(delete-file %S)" link) nil) :error)
                           (format "The person declined to let this eval delete %s"
                                   (abbreviate-file-name link))))
            (should (file-exists-p link))
            (dolist (primitive '(write-region delete-file rename-file copy-file make-symbolic-link
                                 add-name-to-file))
              (advice-mapc (lambda (advice _) (should-not (list primitive advice))) primitive))
            (should (advice-member-p 'amacs-eval-ask 'call-process)))
        (delete-directory dir t)))))

(ert-deftest amacs-shell-test-emacs-own-files-are-not-the-agents-changes ()
  "In a fresh HOME the native compiler wrote its job to /tmp/emacs-async-comp-*.el during the
demo's first eval, and the turn listed it as the agent's new file."
  (let ((job (expand-file-name "emacs-async-comp-amacs-settings-xlwn7W.el" temporary-file-directory)))
    (should (amacs--emacs-own-file-p job))
    (should-not (amacs--emacs-own-file-p "/tmp/x.py"))
    (should-not (amacs--eval-guarded-action 'write-region (list nil nil job)))
    (should-not (amacs--eval-guarded-action 'delete-file (list job)))
    (should-not (amacs--eval-guarded-action 'make-process (list :name "Compiling: /x.el" :command '("emacs"))))
    (should (equal (amacs--eval-guarded-action 'make-process (list :name "x" :command '("ls")))
                   '("run" "ls")))))

(ert-deftest amacs-shell-test-a-rewind-shows-its-replay-from-wherever-the-person-had-scrolled ()
  "A newcomer had moved up to a changed line; after M-x amacs-rewind the shell's window stayed
there, and the replayed conversation showed only after M->."
  (amacs-shell-test--with-shell
    (amacs-shell--output "An old reply.")
    (goto-char (point-min))
    (set-window-point (selected-window) (point-min))
    (cl-letf (((symbol-function 'amacs--call-sync)
               (lambda (method _args)
                 (pcase method
                   ('rewind '(:line "rewound to tick 1"))
                   ('status '(:model "demo" :backend "anthropic" :endpoint "demo" :key-ok t))))))
      (amacs-rewind 1))
    (should (string-match-p "rewound to tick 1; your inputs from there on .*\\. The conversation up to there:"
                            (amacs-shell-test--text)))
    (should (= (point) (point-max)))
    (should (= (window-point (selected-window)) (point-max)))))

;; A rewind took the abandoned inputs out of shell-history, but M-p still offered them (the ring
;; in memory), and it must never take the person's typing: the prompt's text is the present.
(defun amacs-shell-test--rewind-cutting-history (keep)
  "Call `amacs-rewind' back over the last input, the server leaving KEEP in shell-history."
  (cl-letf (((symbol-function 'amacs--call-sync)
             (lambda (method _args)
               (pcase method
                 ('rewind (with-temp-file comint-input-ring-file-name (insert keep))
                          (delete-file amacs-shell--draft-file)
                          '(:line "rewound to tick 1; the abandoned future is kept on git ref refs/amacs/abandoned/x"))
                 ('status '(:recent ((:human "first" :agent "One.")) :key-ok t))))))
    (amacs-rewind 1 "second")))

(ert-deftest amacs-shell-test-a-rewind-keeps-the-typed-input-and-takes-the-abandoned-ones-out-of-m-p ()
  "Typed and not sent, the input stays at the prompt (and is saved again as the draft); M-p offers
the inputs before the tick, not the abandoned one; the rewind's line says where that went."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "first")
    (amacs-shell-test--type-and-send "second")
    (goto-char (point-max))
    (insert "half typed")
    (amacs-shell--save-draft)
    (should (file-exists-p amacs-shell--draft-file))
    (amacs-shell-test--rewind-cutting-history "first\0\n")
    (should (equal (amacs-shell--draft) "half typed"))
    (should (equal (ring-elements comint-input-ring) '("first")))
    (amacs-shell--save-draft)
    (let ((file amacs-shell--draft-file))
      (should (string-suffix-p "half typed" (with-temp-buffer (insert-file-contents file) (buffer-string)))))
    (should (string-match-p "your inputs from there on are kept with it, no longer in M-p (the hub lists it)\\. The conversation"
                            (amacs-shell-test--text)))
    (comint-previous-input 1)
    (should (equal (amacs-shell--draft) "first"))))

(ert-deftest amacs-shell-test-a-rewind-at-an-empty-prompt-puts-the-input-gone-back-over-there ()
  "As Claude Code's rewind does: the input the person went back to before is at the prompt to edit."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "first")
    (amacs-shell-test--type-and-send "second")
    (amacs-shell-test--rewind-cutting-history "first\0\n")
    (should (equal (amacs-shell--draft) "second"))
    (should (= (point) (point-max)))
    (should (string-match-p "and «second» is back at the prompt to edit\\. The conversation"
                            (amacs-shell-test--text)))
    (should (equal (ring-elements comint-input-ring) '("first")))))

;; A newcomer rewound after `note' and `todo': the replayed replies said "RET on the ▸ changed
;; line below" and no such line was replayed (the chat log holds what was said, not what an eval
;; changed in Emacs).
(defun amacs-shell-test--turn-changing (buffer text tick)
  "A turn that ended at TICK and added TEXT to BUFFER, as an eval of the agent's would."
  (push (cons buffer (with-current-buffer buffer (buffer-string)))
        (car (amacs-changes--of (amacs-current-connection))))
  (with-current-buffer buffer (goto-char (point-max)) (insert text))
  (amacs-changes--on-turn-done (list :type "turn-done" :tick tick))
  (amacs-shell--on-turn-done (list :type "turn-done" :tick tick)))

(ert-deftest amacs-shell-test-a-rewind-replays-the-changed-lines-of-the-turns-it-keeps ()
  "Each kept turn's ▸ changed line shows again after its reply, RET still on it; a later turn's does not."
  (let ((notes (generate-new-buffer "notes-ert"))
        (todo (generate-new-buffer "todo-ert")))
    (unwind-protect
        (amacs-shell-test--with-shell
          (amacs-test-with-status '(:tick 0 :key-ok t) (amacs-shell--greet))
          (amacs-shell-test--turn-changing notes "- a line\n" 2)
          (amacs-shell-test--turn-changing todo "* TODO\n" 4)
          (cl-letf (((symbol-function 'amacs--call-sync)
                     (lambda (method _args)
                       (pcase method
                         ('rewind '(:line "rewound to tick 3"))
                         ('status '(:tick 3 :key-ok t
                                    :recent ((:tick 1 :human "note" :agent "Let me.")
                                             (:tick 2 :agent "Done: RET on the ▸ changed line below.")
                                             (:tick 3 :human "todo" :agent "Let me."))))))))
            (amacs-rewind 3))
          (let* ((text (amacs-shell-test--text))
                 (replay (cadr (split-string text "The conversation up to there:\n"))))
            (should (string-match-p (concat "\\`amacs> note\n\nLet me\.\n\nDone: RET on the ▸ changed line below\.\n\n"
                                            "▸ changed: notes-ert (buffer, \\+1 line)\n\namacs> todo\n\nLet me\.\n")
                                    replay))
            (should-not (string-match-p "todo-ert" replay)) ; tick 4 is the abandoned future's
            (should-not (string-match-p "earlier Emacs" replay))
            (goto-char (point-max))
            (search-backward "▸ changed: notes-ert")
            (should (equal (mapcar #'amacs-change-name (amacs-changes-at (point))) '("notes-ert")))))
      (kill-buffer notes)
      (kill-buffer todo))))

(ert-deftest amacs-shell-test-a-fork-takes-the-changed-lines-of-its-turns ()
  "A fork at tick 3 shows the ▸ changed lines of its parent's turns up to 3 with its exchanges, not later ones."
  (let ((notes (generate-new-buffer "notes-ert")))
    (unwind-protect
        (amacs-shell-test--with-shell
          (amacs-test-with-status '(:tick 0 :key-ok t) (amacs-shell--greet))
          (amacs-shell-test--turn-changing notes "one\n" 2)
          (amacs-shell-test--turn-changing notes "two\n" 4)
          (let ((parent (amacs-current-connection))
                (fork (amacs--make-connection :home "/tmp/amacs-ert-fork")))
            (amacs-changes-fork parent fork 3)
            (should (equal (mapcar #'car (amacs-changes-kept fork 3)) '(2)))
            (should (equal (amacs-changes-seen-since fork) 0))
            (should (string-prefix-p "▸ changed: notes-ert" (cdar (amacs-changes-kept fork 3))))))
      (kill-buffer notes))))

(ert-deftest amacs-shell-test-a-rewind-into-turns-before-this-emacs-says-they-show-no-changed-line ()
  "Turns of an earlier Emacs have no ▸ changed line to show: the replay says so, and why."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:tick 6 :key-ok t :recent ((:tick 6 :human "six" :agent "6.")))
      (amacs-shell--greet))
    (should-not (string-match-p "earlier Emacs" (amacs-shell-test--text))) ; a start says nothing of it
    (cl-letf (((symbol-function 'amacs--call-sync)
               (lambda (method _args)
                 (pcase method
                   ('rewind '(:line "rewound to tick 3"))
                   ('status '(:tick 3 :key-ok t :recent ((:tick 3 :human "three" :agent "3."))))))))
      (amacs-rewind 3))
    (should (string-match-p "The conversation up to there:\n;; (Turns up to tick 3 were in an earlier Emacs: \
no ▸ changed lines\.)\namacs> three"
                            (amacs-shell-test--text)))))

;; Was: after a restart the demo's replayed `todo' reply said "RET on the ▸ changed line
;; below shows the diff" and no line followed, with no word why (a rewind said it).
(ert-deftest amacs-shell-test-a-restart-says-its-replayed-evals-show-no-changed-line ()
  "A start whose replayed turns evaluated says, in one line, why they show no ▸ changed line."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:tick 5 :key-ok t
                              :recent ((:tick 4 :human "todo" :agent "Done: RET on the ▸ changed line below."
                                        :eval (:form "(find-file \"todo.org\")" :result "t" :success t))
                                       (:tick 5 :human "five" :agent "5.")))
      (amacs-shell--greet))
    (should (string-match-p "Resumed: .*\n;; (Turns up to tick 5 were in an earlier Emacs: \
no ▸ changed lines\\.)\namacs> todo"
                            (amacs-shell-test--text)))))

;; Was: with that line said once above, the replayed reply still said "RET on the ▸ changed
;; line below" where no line followed it.
(ert-deftest amacs-shell-test-a-replayed-reply-pointing-at-its-changed-line-says-where-it-went ()
  "Where a replayed reply's ▸ changed line was, a note says why it is not there."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:tick 6 :key-ok t
                              :recent ((:tick 4 :human "todo" :agent "Done: RET on the ▸ changed line below."
                                        :eval (:form "(find-file \"todo.org\")" :result "t" :success t))
                                       (:tick 5 :human "eval" :agent "4."
                                        :eval (:form "(+ 2 2)" :result "4" :success t))
                                       (:tick 6 :human "six" :agent "6.")))
      (amacs-shell--greet))
    (let ((text (amacs-shell-test--text)))
      (should (string-match-p "RET on the ▸ changed line below\\.\n\n?▸ eval (find-file[^\0]*?⇒ t\n\
;; (No ▸ changed line here: what this turn changed was known only to the Emacs it ran in\\.)\n\n?amacs> eval"
                              text))
      ;; Only where a reply points at it.
      (should (= 1 (cl-count-if (lambda (line) (string-prefix-p ";; (No ▸ changed" line))
                                (split-string text "\n")))))))

;;;; Rendering

(ert-deftest amacs-shell-test-replies-render-with-org-font-lock ()
  "Issue 9: replies are fontified by org, source blocks in their own mode."
  (amacs-shell-test--with-shell
    (require 'org)
    (amacs--render-work-buffer)         ; org preloaded, as at any idle moment after start
    (amacs-shell--on-reply
     '(:text "*Bold* and ~code~.\n#+begin_src emacs-lisp\n(defun demo (x) x)\n#+end_src"))
    (let ((bold (amacs-shell-test--face-at "Bold*"))
          (keyword (amacs-shell-test--face-at "defun")))
      (should (memq 'bold (ensure-list bold)))
      (should (memq 'font-lock-keyword-face (ensure-list keyword))))
    (should (string-match-p "#\\+begin_src emacs-lisp" (amacs-shell-test--text)))
    (goto-char (point-min))
    (search-forward "(defun")
    (amacs-shell-copy-code)
    (should (equal (current-kill 0) "(defun demo (x) x)\n"))
    (amacs-shell-copy-reply)
    (should (string-prefix-p "*Bold* and ~code~." (current-kill 0)))
    (should-not (text-properties-at 0 (current-kill 0)))))

;; The first answer after a start: org is not loaded yet (it loads a file at each idle moment).
(ert-deftest amacs-shell-test-first-reply-does-not-wait-for-org ()
  "Measured: the first answer after launch waited ~1 s for org to load before it was shown.
Before org is preloaded a reply is shown plain at once, and rendered in place once it is."
  (amacs-shell-test--with-shell
    (let ((amacs--render-preload-queue nil)
          (amacs--render-preload-timer nil)
          (loaded nil)
          (rendered nil))
      (cl-letf (((symbol-function 'featurep)
                 (lambda (f &rest _) (or (not (eq f 'org)) loaded)))
                ((symbol-function 'require)
                 (lambda (f &rest _) (when (eq f 'org) (error "Org loaded before the reply was shown"))))
                ((symbol-function 'run-with-idle-timer) (lambda (&rest _) nil)))
        (amacs-shell--on-reply-delta '(:text "It is "))
        (amacs-shell--on-reply '(:text "It is *bold*." :streamed t)))
      (should (string-match-p "It is \\*bold\\*\\.\n" (amacs-shell-test--text)))
      (should (save-excursion (goto-char (point-min)) (search-forward "It is")
                              (get-text-property (match-beginning 0) 'amacs-unrendered)))
      (should (functionp (car (last amacs--render-preload-queue))))
      (cl-letf (((symbol-function 'amacs-render-org)
                 (lambda (text) (setq rendered text) (propertize text 'font-lock-face 'bold))))
        (funcall (car (last amacs--render-preload-queue))))
      (should (equal rendered "It is *bold*."))
      (should (eq (amacs-shell-test--face-at "It is") 'bold))
      (should-not (text-property-not-all (point-min) (point-max) 'amacs-unrendered nil))
      (should (string-match-p "It is \\*bold\\*\\.\n\n?amacs> \\'" (amacs-shell-test--text)))
      (amacs-shell-copy-reply)
      (should (equal (current-kill 0) "It is *bold*.")))))

;; Before org is loaded a reply is drawn by regexps (`amacs-render-quick'); org's drawing follows.
(defconst amacs-shell-test--org-look
  '((org-level-1 . font-lock-function-name-face) (org-level-2 . font-lock-variable-name-face)
    (org-level-3 . font-lock-keyword-face) (org-verbatim . shadow) (org-code . shadow)
    (org-link . link) (org-list-dt . bold) (org-checkbox . bold)
    (org-block-begin-line . font-lock-comment-face) (org-block-end-line . font-lock-comment-face)
    (org-meta-line . font-lock-comment-face) (org-table . amacs-render-table))
  "Org's faces and the faces they come to (by inheritance, in Emacs 28's org).")

(defun amacs-shell-test--look (text)
  "TEXT as it looks: each visible character with its faces, org's as they come to.
A source block's code, fontified by its language in org, is `shadow' alone."
  (let (look)
    (dotimes (i (length text))
      (unless (get-text-property i 'invisible text)
        (let* ((face (get-text-property i 'font-lock-face text))
               (faces (cond ((null face) nil)
                            ((and (consp face) (eq (car face) :inherit)) (ensure-list (cadr face)))
                            ((and (consp face) (not (keywordp (car face)))) face)
                            (t (list face)))))
          (push (cons (aref text i)
                      (if (memq 'org-block faces)
                          '(shadow)
                        (mapcar (lambda (f) (or (cdr (assq f amacs-shell-test--org-look)) f)) faces)))
                look))))
    (nreverse look)))

(defconst amacs-shell-test--replies
  '("I am AMACS's demo model. Type one of these words and press RET:

- =eval=: I evaluate elisp in your Emacs; the ▸ eval line shows it (TAB on it: the form and its result)
- =long=, =markdown=, =error=, =loop=: a long reply, Markdown shown as org (C-g stops it)

Then M-x amacs-rewind takes me back."
    "** A heading in Markdown

Here is *bold* text, ~inline code~ and a list:

- first item
- second item

#+begin_src emacs-lisp
(defun demo-square (x)
  \"Return X squared.\"
  (* x x))
#+end_src

| name | value |
|------+-------|
| a    | 1     |"
    "* Top /it/ heading
Some =verb= and ~code~, *bold*, /ital/, _under_, +strike+ here, *over
two lines* too.
A link [[https://example.org][the site]] and [[file:foo.org]] and https://gnu.org/x.
- term :: description
- [ ] box and [X] not one
1. numbered *b*
# a comment
#+begin_quote
quoted *q*
#+end_quote
#+begin_example
ex *no*
#+end_example
snake_case and 2*3*4 and a*b* c, =a= b =c= and *not
*** a heading* ends it.")
  "Replies as the agent writes them: the demo's, Markdown made org, org's markup.")

(ert-deftest amacs-shell-test-a-reply-before-org-looks-as-org-will-draw-it ()
  "Seen on a loaded machine: the first reply showed =eval= and *bold* raw for seconds,
until org, loaded a piece at each idle moment, drew it again.  Drawn by
regexps meanwhile, a reply shows the same characters with the faces org's
come to: only source blocks' code changes when org draws it."
  (require 'org)
  (dolist (hide '(t nil))
    (let ((amacs-render-hide-emphasis-markers hide))
      (dolist (text amacs-shell-test--replies)
        (should (equal (amacs-shell-test--look (amacs-render-quick text))
                       (amacs-shell-test--look (amacs-render-org text))))))))

(ert-deftest amacs-shell-test-the-first-reply-reads-as-org-before-org-is-loaded ()
  "The first answer, drawn before org is loaded, hides org's markers already."
  (amacs-shell-test--with-shell
    (let ((amacs--render-preload-queue nil)
          (amacs--render-preload-timer nil))
      (cl-letf (((symbol-function 'featurep) (lambda (f &rest _) (not (eq f 'org))))
                ((symbol-function 'require)
                 (lambda (f &rest _) (when (eq f 'org) (error "Org loaded before the reply was shown"))))
                ((symbol-function 'run-with-idle-timer) (lambda (&rest _) nil)))
        (amacs-shell--on-reply '(:text "- =eval=: it evaluates *elisp*, see [[https://gnu.org][GNU]].")))
      (with-current-buffer amacs-shell-buffer-name
        (goto-char (point-min))
        (search-forward "- =eval=")
        (should (get-text-property (match-beginning 0) 'amacs-unrendered)) ; org draws it later
        (let ((visible nil))
          (dotimes (i (- (line-end-position) (line-beginning-position)))
            (let ((pos (+ (line-beginning-position) i)))
              (unless (invisible-p pos) (push (char-after pos) visible))))
          (should (equal (concat (nreverse visible)) "- eval: it evaluates elisp, see GNU."))))
      (should (equal (amacs-shell-test--face-at "eval=:") '(shadow)))
      (should (equal (amacs-shell-test--face-at "elisp*,") '(bold))))))

;;;; Context from your own Emacs

(ert-deftest amacs-shell-test-send-region-quotes-code-with-its-language ()
  "Issue 9: the region goes as a source block in its mode's language, with the message."
  (amacs-shell-test--with-shell
    (with-temp-buffer
      (emacs-lisp-mode)
      (insert "(defun a () 1)\n(defun b () 2)\n")
      (amacs-send-region (point-min) (point-max) "What do these do?"))
    (let ((sent (car (cadr (seq-find (lambda (c) (eq (car c) 'submit)) amacs-shell-test--calls)))))
      (should (string-match-p (concat "\\`What do these do\\?\n\nFrom .*, lines 1-2:\n"
                                      "#\\+begin_src emacs-lisp\n(defun a () 1)\n(defun b () 2)\n#\\+end_src\\'")
                              sent)))
    (should (string-match-p "amacs> What do these do\\?" (amacs-shell-test--text))))
  (amacs-shell-test--with-shell
    (with-temp-buffer
      (text-mode)
      (insert "Some prose.")
      (amacs-send-region (point-min) (point-max) ""))
    (let ((sent (car (cadr (seq-find (lambda (c) (eq (car c) 'submit)) amacs-shell-test--calls)))))
      (should (string-match-p "#\\+begin_quote\nSome prose.\n#\\+end_quote" sent)))))

(ert-deftest amacs-shell-test-add-buffer-names-the-file-and-says-so ()
  "Issue 9: `amacs-add-buffer' sends the file name of a file buffer and shows what was added."
  (amacs-shell-test--with-shell
    (let ((file (make-temp-file "amacs-add" nil ".py")))
      (with-current-buffer (find-file-noselect file)
        (cl-letf (((symbol-function 'amacs-call)
                   (lambda (method args callback &rest _)
                     (push (list method args) amacs-shell-test--calls)
                     (funcall callback '(:thread "main")))))
          (amacs-add-buffer))
        (kill-buffer))
      (should (equal (car amacs-shell-test--calls)
                     (list 'person_add_buffer (list (abbreviate-file-name file)))))
      (should (string-match-p (regexp-quote (format ";; Added %s to thread main" (abbreviate-file-name file)))
                              (amacs-shell-test--text))))))

;;;; History, greeting, header line, mode line

(ert-deftest amacs-shell-test-a-fresh-home-is-greeted-in-two-lines ()
  "Issue 9: a home with no history greets with the keys and how to ask for help."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:recent nil :model "claude-x" :backend "anthropic" :key-ok t)
      (amacs-shell--greet))
    (let ((lines (split-string (amacs-shell-test--text) "\n")))
      (should (= (length lines) 3))          ; two lines of greeting, then the prompt
      (should (string-match-p "RET" (nth 0 lines)))
      (should (string-match-p "C-c C-c interrupts" (nth 0 lines)))
      (should (string-match-p "what can you do\\?" (nth 1 lines)))
      (should (equal (nth 2 lines) "amacs> ")))))

(ert-deftest amacs-shell-test-a-fresh-home-with-no-key-is-shown-the-demo-once ()
  "A newcomer's finding: with no key the greeting invited \"what can you do?\"
three lines above the one saying no question is answered without a key.
Then it named the demo on the line above the server's note, which names it too."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:recent nil :model "claude-x" :backend "anthropic" :key-ok nil
                              :notice "No API key: try M-x amacs-demo, or set ANTHROPIC_API_KEY and \
M-x amacs-restart; other models: docs/local-models.md.")
      (amacs-shell--greet))
    (let ((text (amacs-shell-test--text)))
      (should (string-match-p "\\`;; Type to the agent.*\n;; C-h m lists every key\\.\n;; No API key: try M-x amacs-demo"
                              text))
      (should (= 1 (cl-count-if (lambda (line) (string-search "amacs-demo" line))
                                (split-string text "\n"))))
      (should-not (string-match-p "what can you do" text)))))

(ert-deftest amacs-shell-test-header-line-says-what-the-agent-does ()
  "Issue 9: model and backend, then thinking / writing / eval / retrying / agents."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:model "claude-x" :backend "anthropic" :key-ok t)
      (amacs-shell--transition 'ready)
      (should (equal (amacs-shell-header-line) " claude-x (anthropic) — waiting for you"))
      (amacs-shell--on-turn-start nil)
      (should (string-match-p "thinking…" (amacs-shell-header-line)))
      (amacs-shell--on-reply-delta '(:text "Hi"))
      (should (string-match-p "writing…" (amacs-shell-header-line)))
      ;; A note's words decide nothing: the header goes by the retry event's fields.
      (amacs-shell--on-annotation '(:text "retrying in 9.0 s" :kind "status"))
      (should (string-match-p "writing…" (amacs-shell-header-line)))
      (amacs-shell--on-retry
       '(:text "Model API overloaded (529); retrying in 4.0 s (attempt 2 of 5)" :seconds 4.0 :attempt 2 :attempts 5))
      (should (string-match-p "retrying in 4.0 s" (amacs-shell-header-line)))
      (should (string-match-p ";; Model API overloaded (529); retrying in 4.0 s" (amacs-shell-test--text)))
      (amacs-shell--on-retry '(:text "Model API overloaded (529); retrying now" :seconds 0.0 :attempt 3 :attempts 5))
      (should (string-match-p "retrying now" (amacs-shell-header-line)))
      ;; A model call that waits on a tool server to start says so, then thinks again.
      (amacs-shell--on-preparing '(:text "starting tool server slowstart…"))
      (should (string-match-p "— starting tool server slowstart…" (amacs-shell-header-line)))
      (amacs-shell--on-preparing '(:text ""))
      (should (string-match-p "thinking…" (amacs-shell-header-line)))
      (amacs-shell--on-agents '(:agents ((:id "task-1") (:id "task-2"))))
      (should (string-match-p "· 2 agents working" (amacs-shell-header-line)))
      (amacs-shell--on-turn-done nil)
      (should (string-match-p "waiting for you" (amacs-shell-header-line))))))

(ert-deftest amacs-shell-test-without-a-key-the-header-and-note-say-so ()
  "A newcomer's findings: with no key the header does not say it waits for you, it says
what is missing; `amacs-set-model' brings the server's word on the key; a note wider than
the window shows `;;' on its wrapped part too (display only: the text is unchanged)."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:model "claude-x" :backend "anthropic" :key-ok nil)
      (amacs-shell--transition 'ready)
      (should (equal (amacs-shell-header-line)
                     " claude-x (anthropic) — no API key: the note below says how to give one"))
      (cl-letf (((symbol-function 'amacs-call)
                 (lambda (_method _args &optional callback _errback)
                   (funcall callback '(:backend "openai" :model "llama3" :key-ok t)))))
        (amacs-set-model "openai" "llama3" "http://localhost:11434/v1"))
      (should (equal (amacs-shell-header-line) " llama3 (openai) — waiting for you"))
      (amacs-shell--note (make-string 300 ?x))
      (goto-char (point-min))
      (search-forward ";; xxx")
      (should (equal (substring-no-properties (get-text-property (point) 'wrap-prefix)) ";; "))
      (should-not (string-match-p "xxx;;" (amacs-shell-test--text))))))

(ert-deftest amacs-shell-test-multiline-input-is-one-history-entry ()
  "Issue 9: an input of several lines comes back from M-p as one, after a restart."
  (let ((file (expand-file-name "shell-history" (make-temp-file "amacs-history" t))))
    (amacs-shell-test--with-shell
      (setq-local comint-input-ring-file-name file)
      (amacs-shell-test--type-and-send "line one\nline two")
      (amacs-shell--save-history))
    (amacs-shell-test--with-shell
      (setq-local comint-input-ring-file-name file)
      (amacs-shell--read-history)
      (should (equal (ring-ref comint-input-ring 0) "line one\nline two")))))

(ert-deftest amacs-shell-test-an-input-sent-again-is-in-the-history-file-each-time ()
  "A newcomer sent an input again with M-p RET: the ring keeps a repeat once,
so M-p does not show it twice, but the history file, the record of what
was typed that a rewind moves onto the abandoned future, lacked it."
  (amacs-shell-test--with-shell
    (setq-local comint-input-ring-file-name
                (expand-file-name "shell-history" (make-temp-file "amacs-history" t)))
    (amacs-shell-test--type-and-send "What is the capital of France?")
    (goto-char (point-max))
    (comint-previous-input 1)
    (comint-send-input)
    (amacs-shell-test--type-and-send "help")
    (amacs-shell--save-history-safely)  ; a save with nothing sent (C-x C-c) adds nothing
    (should (equal (ring-elements comint-input-ring) '("help" "What is the capital of France?")))
    (should (equal (let ((file comint-input-ring-file-name)) ; buffer-local: not the temp buffer's
                     (with-temp-buffer (insert-file-contents file) (buffer-string)))
                   "What is the capital of France?\0\nWhat is the capital of France?\0\nhelp\0\n"))
    (amacs-shell--reread-history)       ; as after a rewind: M-p has the repeat once
    (should (equal (ring-elements comint-input-ring) '("help" "What is the capital of France?")))))

(ert-deftest amacs-shell-test-cost-fits-80-columns-and-shows-the-enforced-budget ()
  "Issue 9: the mode line shows this session's cost and the budget the agent enforces."
  (let ((amacs-shell-usage '(:session (:cost 0.16) :this-tick (:cost 0.008)
                                      :spent 0.43 :budget-limit 5.0)))
    (should (equal (amacs-shell-cost-string) " $0.160 session · budget $0.430/$5.00"))
    (should (< (length (amacs-shell-cost-string)) 40))))

;;;; Found by a newcomer in tmux

(ert-deftest amacs-shell-test-a-running-eval-says-c-g-stops-it ()
  "The header says an eval runs and that C-g stops it; a stopped eval is said so."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:model "claude-x" :backend "anthropic")
      (amacs-shell--on-reply-delta '(:text "Let me spin"))
      (amacs-shell--eval-start '(:agent "primary" :form "(while t)"))
      (should (string-match-p "running an eval… (C-g stops it)" (amacs-shell-header-line)))
      (amacs-shell--eval-done '(:agent "primary") (list :success nil :error amacs-eval-stopped))
      (should (string-match-p "▸ eval (while t) → error: quit: the eval was stopped (C-g)\n"
                              (amacs-shell-test--text)))
      (should (string-match-p "\n;; You stopped the eval (C-g): the agent gets that as its result"
                              (amacs-shell-test--text)))
      (should (string-match-p "thinking…" (amacs-shell-header-line)))
      (amacs-shell--on-agents '(:agents ((:id "task-1"))))
      (amacs-shell--eval-start '(:agent "task-1" :form "(sleep-for 9)"))
      (should (string-match-p "task-1 is running an eval… (C-g stops it)" (amacs-shell-header-line)))
      (amacs-shell--eval-done '(:agent "task-1") '(:success t :result "nil"))
      (should (string-match-p "thinking…" (amacs-shell-header-line))))))

(ert-deftest amacs-shell-test-the-header-names-whom-the-primary-waits-for ()
  "After an eval that registered a wait, the header names whom the primary sleeps on."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:model "claude-x" :backend "anthropic")
      (amacs-shell--on-turn-start nil)
      (amacs-shell--eval-start '(:agent "primary" :form "(agent-wait-for ...)"))
      (let ((amacs--eval-wait '(:talk-ids (1 2 3) :timeout 300))
            (amacs--eval-talks '((3 . "you") (2 . "task-2") (1 . "task-1"))))
        (amacs-shell--eval-done '(:agent "primary") '(:success t :result "t")))
      (should (string-match-p "waiting for task-1, task-2, your reply…" (amacs-shell-header-line)))
      (should (amacs-shell-turn-wait-timer (amacs-shell--turn)))
      (amacs-shell--on-annotation '(:text "task-1 (researcher) said: found" :kind "agent"))
      (should (string-match-p "waiting for task-1, task-2, your reply…" (amacs-shell-header-line)))
      (amacs-shell--on-agent-ended '(:id "task-1" :state "done" :ok t :text "Tâche (researcher) done: found"))
      (should (string-match-p "waiting for task-2, your reply…" (amacs-shell-header-line)))
      (should (string-match-p "^✓ Tâche (researcher) done: found$" (amacs-shell-test--text)))
      (amacs-shell--on-agents '(:agents ((:id "task-2"))))
      (amacs-shell--on-agents '(:agents nil))  ; no longer at work: it answered
      (should (string-match-p "waiting for your reply…" (amacs-shell-header-line)))
      (amacs-shell--on-input-taken nil)
      (should (string-match-p "thinking…" (amacs-shell-header-line)))
      (should-not (amacs-shell-turn-wait-timer (amacs-shell--turn)))
      ;; A task that ended while the eval still ran is not waited for.
      (amacs-shell--eval-start '(:agent "primary" :form "(agent-wait-for ...)"))
      (amacs-shell--on-agent-ended '(:id "task-3" :state "failed" :ok nil :text "task-3 (researcher) failed: no"))
      (should (string-match-p "^✗ task-3 (researcher) failed: no$" (amacs-shell-test--text)))
      (let ((amacs--eval-wait '(:talk-ids (4 5) :timeout 0.05))
            (amacs--eval-talks '((5 . "task-4") (4 . "task-3"))))
        (amacs-shell--eval-done '(:agent "primary") '(:success t :result "t")))
      (should (string-match-p "waiting for task-4…" (amacs-shell-header-line)))
      ;; The wait's timeout: the agent wakes.  Waited for, not slept: `sleep-for' checks
      ;; its end before the timers, so an Emacs paused past its end (a loaded machine; a
      ;; SIGSTOP shows it each time) returned with the timer due and not run.
      (let ((deadline (+ (float-time) 10)))
        (while (and (amacs-shell-turn-wait-timer (amacs-shell--turn)) (< (float-time) deadline))
          (sleep-for 0.02)))
      (should (string-match-p "thinking…" (amacs-shell-header-line))))))

(ert-deftest amacs-shell-test-agent-calls-note-talks-and-the-wait ()
  "Talks an eval starts are noted with who answers them, and its wait too."
  (let ((amacs--eval-talks nil) (amacs--eval-wait nil))
    (cl-letf (((symbol-function 'amacs--call-sync)
               (lambda (method args)
                 (pcase method
                   ('agent_task (list :handle "task-7" :talk-id 1 :template "researcher"))
                   ('talk_user '(:talk-id 2 :to "user"))
                   ('agent_consider '(:talk-id 3 :viewpoints ("optimist" "skeptic")))
                   ('wait_for (list :waiting-for (nth 1 args) :timeout 60))))))
      (agent-task "researcher" "Find A")
      (agent-talk-user "Which one?")
      (agent-consider "Is it good?")
      (agent-wait-for '(1 2 3)))
    (should (equal amacs--eval-talks '((3 . "optimist, skeptic") (2 . "you") (1 . "task-7"))))
    (should (equal amacs--eval-wait '(:talk-ids (1 2 3) :timeout 60)))))

(ert-deftest amacs-shell-test-previous-prompt-goes-from-input-to-input ()
  "C-c C-p and C-c C-n stop on the person's inputs only, not on eval lines."
  (amacs-shell-test--with-shell
    (let ((amacs-eval-confirm nil))
      (dolist (text '("first" "second"))
        (amacs-shell-test--type-and-send text)
        (amacs-shell--on-input-taken nil)
        (amacs-shell-test--eval "(+ 1 1)")
        (amacs-shell--on-reply '(:text "Two."))))
    (goto-char (point-max))
    (insert "draft")
    (should (eq (key-binding (kbd "C-c C-p")) #'amacs-shell-previous-prompt))
    (should (eq (key-binding (kbd "C-c C-n")) #'amacs-shell-next-prompt))
    (let ((line (lambda () (let ((inhibit-field-text-motion t))
                             (buffer-substring-no-properties (line-beginning-position) (line-end-position))))))
      (amacs-shell-previous-prompt 1)   ; as in comint: first to the start of this input
      (should (equal (funcall line) "amacs> draft"))
      (should (looking-at "draft"))
      (amacs-shell-previous-prompt 1)
      (should (equal (funcall line) "amacs> second"))
      (should (looking-back (regexp-quote amacs-shell-prompt) (- (point) (length amacs-shell-prompt))))
      (amacs-shell-previous-prompt 1)
      (should (equal (funcall line) "amacs> first"))
      (amacs-shell-previous-prompt 1)   ; no earlier input: point stays
      (should (equal (funcall line) "amacs> first"))
      (amacs-shell-next-prompt 2)
      (should (equal (funcall line) "amacs> draft"))
      (should (= (point) (process-mark (get-buffer-process (current-buffer))))))))

(ert-deftest amacs-shell-test-quitting-mid-turn-asks-first ()
  "C-x C-c while the agent works asks first (a newcomer's finding): no answer keeps Emacs."
  (amacs-shell-test--with-shell
    (should (memq #'amacs-shell--query-quit kill-emacs-query-functions))
    (let ((asked nil))
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (prompt) (setq asked prompt) nil)))
        (should (amacs-shell--query-quit))    ; idle: quits without a question
        (should-not asked)
        (setq amacs-shell-busy t)
        (should-not (amacs-shell--query-quit)) ; working: asked, and "no" keeps Emacs
        (should (string-match-p "working on your turn; quit anyway" asked))
        (cl-letf (((symbol-function 'amacs-live-p) (lambda (&rest _) nil)))
          (should (amacs-shell--query-quit))))))) ; no server: nothing to stop

;;;; Polish a newcomer asked for

(ert-deftest amacs-shell-test-tab-acts-only-on-eval-lines ()
  "A newcomer's finding: TAB on a reply line opened *Completions* with file names.
On an eval line TAB folds it; elsewhere above the prompt it goes to the
next eval line (S-TAB to the one before); at the prompt it does nothing."
  (amacs-shell-test--with-shell
    (amacs-shell--on-reply '(:text "First reply ~code~."))
    (let ((amacs-eval-confirm nil))
      (amacs-shell-test--eval "(+ 2 2)")
      (setq amacs-shell-test--calls nil)
      (amacs-shell-test--eval "(+ 3 3)"))
    (amacs-shell--on-reply '(:text "Last reply."))
    (cl-letf (((symbol-function 'completion-at-point) (lambda () (error "Completion was called"))))
      (goto-char (point-min))
      (search-forward "First")
      (amacs-shell-tab)                 ; on a reply: to the next eval line, nothing folded
      (should (looking-at "▸ eval (\\+ 2 2)"))
      (should (invisible-p (save-excursion (search-forward "⇒ 4") (match-beginning 0))))
      (amacs-shell-tab)                 ; on it: folds it open
      (should-not (invisible-p (save-excursion (search-forward "⇒ 4") (match-beginning 0))))
      (search-forward "Last")
      (amacs-shell-previous-eval 1)
      (should (looking-at "▸ eval (\\+ 3 3)"))
      (goto-char (point-max))
      (insert "draft")
      (let ((before (buffer-string)))
        (amacs-shell-tab)               ; at the prompt: nothing at all
        (should (equal (buffer-string) before))
        (should (= (point) (point-max)))))
    (should-not (get-buffer-window "*Completions*"))))

(ert-deftest amacs-shell-test-past-output-is-read-only ()
  "A newcomer's finding: a stray key edited a reply (\"Done: txhat was\").
Replies, notes, eval lines and past inputs are read-only; the input is not."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "hello")
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply '(:text "Done: that was it."))
    (amacs-shell--on-annotation '(:text "a note" :kind "info"))
    (let ((amacs-eval-confirm nil)) (amacs-shell-test--eval "(+ 2 2)"))
    (amacs-shell--on-turn-done nil)
    (dolist (text '("that was" "hello" "a note" "eval (+ 2 2)" "Done"))
      (goto-char (point-min))
      (search-forward text)
      (goto-char (match-beginning 0))
      (should-error (insert "x") :type 'text-read-only)
      (goto-char (match-end 0))
      (should-error (delete-char 1) :type 'text-read-only))
    (goto-char (point-min))             ; before the first output too
    (should-error (insert "x") :type 'text-read-only)
    (should (string-match-p "Done: that was it\\." (amacs-shell-test--text)))
    (goto-char (point-max))
    (insert "typed")                     ; the input is the person's
    (should (string-suffix-p "amacs> typed" (amacs-shell-test--text)))
    (amacs-shell--on-reply '(:text "Still shown."))   ; and the shell still writes above it
    (should (string-match-p "Still shown\\.\n\namacs> typed\\'" (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-typing-in-the-output-goes-to-the-input ()
  "A key typed with point on past output moves point to the input first.
The output is read-only: without the move every typed character was refused."
  (amacs-shell-test--with-shell
    (amacs-shell-test--type-and-send "hello")
    (amacs-shell--on-input-taken nil)
    (amacs-shell--on-reply '(:text "Done: that was it."))
    (amacs-shell--on-turn-done nil)
    (goto-char (point-min))
    (search-forward "that was")
    (let ((this-command 'self-insert-command))
      (run-hooks 'pre-command-hook))
    (should (= (point) (point-max)))
    (insert "next question")
    (should (string-suffix-p "amacs> next question" (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-describe-mode-describes-amacs ()
  "A newcomer's finding: C-h m in the shell listed Shell-Dirtrack mode.
Once shell.el is loaded its directory tracking is on in every buffer by default."
  (require 'shell)
  (amacs-shell-test--with-shell
    (save-window-excursion
      (describe-mode)
      (with-current-buffer (help-buffer)
        (let ((text (buffer-string)))
          (should-not (string-match-p "Shell-Dirtrack" text))
          (should (string-match-p "The AMACS shell: talk to the agent" text))
          (should (string-match-p "TAB or RET on such a line shows its form" text))
          ;; A newcomer's finding: C-h m named none of the commands run by name.
          (dolist (command '("amacs-rewind" "amacs-fork" "amacs-restart" "amacs-set-budget" "amacs-set-model"))
            (should (string-match-p (regexp-quote command) text))))))))

(ert-deftest amacs-shell-test-preload-runs-a-piece-only-when-idle-without-input ()
  "A newcomer's finding: org loaded in one blocking step as they began to type.
A piece of the preload runs only after `amacs-render-preload-idle' seconds
of idleness with no key pending, one piece per step; else it waits for
the next idle moment and runs nothing."
  (let* ((ran nil) (idle-timers 0) (timers 0) (idle 1.0) (pending nil)
         (amacs-render-preload-idle 0.5)
         (amacs--render-preload-timer nil)
         (amacs--render-preload-queue
          (list (lambda () (push 'a ran)) (lambda () (push 'b ran)))))
    (cl-letf (((symbol-function 'current-idle-time)
               (lambda () (and idle (seconds-to-time idle))))
              ((symbol-function 'input-pending-p) (lambda (&rest _) pending))
              ((symbol-function 'run-with-idle-timer)
               (lambda (&rest _) (cl-incf idle-timers) 'idle-timer))
              ((symbol-function 'run-at-time)
               (lambda (&rest _) (cl-incf timers) 'timer)))
      (setq pending t)
      (amacs--render-preload-step)
      (should-not ran)
      (should (= idle-timers 1))
      (setq pending nil idle 0.2)
      (amacs--render-preload-step)
      (should-not ran)
      (setq idle nil)
      (amacs--render-preload-step)
      (should-not ran)
      (should (= idle-timers 3))
      (setq idle 0.6)
      (amacs--render-preload-step)
      (should (equal ran '(a)))
      (should (= timers 1))             ; the next piece is asked for at once
      (amacs--render-preload-step)
      (should (equal ran '(b a)))
      (should (= timers 1))             ; nothing left: no timer
      (should-not amacs--render-preload-timer))))

(ert-deftest amacs-shell-test-preload-waits-for-the-answer-and-lets-it-in ()
  "Measured: the first answer after launch was read only once the whole preload had run.
Asked for at once (`run-at-time' 0), each next piece was due before Emacs
read its processes again: ~7 s of org and gnus, back to back, while the
person waited for the answer that had arrived.  A piece waits while a
shell's turn is busy, and the next one is asked for after a gap."
  (let* ((ran nil) (idle-timers 0) (delays nil)
         (amacs-render-preload-idle 0.5)
         (amacs-shell-busy t)
         (amacs--render-preload-timer nil)
         (amacs--render-preload-queue
          (list (lambda () (push 'a ran)) (lambda () (push 'b ran)))))
    (cl-letf (((symbol-function 'current-idle-time) (lambda () (seconds-to-time 5)))
              ((symbol-function 'input-pending-p) (lambda (&rest _) nil))
              ((symbol-function 'run-with-idle-timer)
               (lambda (&rest _) (cl-incf idle-timers) 'idle-timer))
              ((symbol-function 'run-at-time)
               (lambda (delay &rest _) (push delay delays) 'timer)))
      (amacs--render-preload-step)
      (should-not ran)                  ; a turn waits for its answer
      ;; Looked at again later, by a timer: an idle timer made while Emacs is idle
      ;; for longer than its time is due at once, and Emacs never read the answer.
      (should (= idle-timers 0))
      (should (equal delays (list amacs-render-preload-idle)))
      (setq amacs-shell-busy nil)
      (amacs--render-preload-step)
      (should (equal ran '(a)))
      (should (and (numberp (car delays)) (> (car delays) 0))))))

(ert-deftest amacs-shell-test-preload-pieces-load-org-file-by-file ()
  "The preload's pieces load org, then render; what waits for it comes last."
  (let ((amacs-render-org t)
        (amacs--render-preload-timer nil)
        (amacs--render-preload-queue nil)
        (marker (lambda () 'after)))
    (cl-letf (((symbol-function 'featurep) (lambda (f &rest _) (not (eq f 'org))))
              ((symbol-function 'run-with-idle-timer) (lambda (&rest _) 'idle-timer)))
      (amacs-render-after-preload marker)
      (should (eq (car (last amacs--render-preload-queue)) marker))
      (should (memq #'amacs--render-work-buffer amacs--render-preload-queue))
      (should (> (length amacs--render-preload-queue) 30))
      ;; Asked for twice (a second shell), the pieces are not queued twice.
      (let ((n (length amacs--render-preload-queue)))
        (amacs-render-preload)
        (should (= n (length amacs--render-preload-queue))))
      (should (eq amacs--render-preload-timer 'idle-timer)))))

(ert-deftest amacs-shell-test-the-resumed-line-stands-above-the-exchanges-it-names ()
  "A newcomer read \"Resumed: the last exchanges\" under them, as if it named what came next.
A rewind's own line says what follows it; no second one."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:recent ((:human "q" :agent "A.")) :key-ok t)
      (amacs-shell--greet))
    (should (string-prefix-p (concat ";; Resumed: the last exchanges from agent-chat.org (C-c C-l opens it all):\n"
                                     "amacs> q\n\nA.\n")
                             (amacs-shell-test--text)))
    (should (= (cl-count-if (lambda (line) (string-prefix-p ";; Resumed" line))
                            (split-string (amacs-shell-test--text) "\n"))
               1))
    (cl-letf (((symbol-function 'amacs--call-sync)
               (lambda (method _args)
                 (pcase method
                   ('rewind '(:line "rewound to tick 1"))
                   ('status '(:recent ((:human "q" :agent "A.")) :key-ok t))))))
      (amacs-rewind 1))
    (should (string-suffix-p (concat ";; rewound to tick 1; your inputs from there on are kept with it, no longer in M-p "
                                     "(the hub lists it). The conversation up to there:\namacs> q\n\nA.\n\namacs> ")
                             (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-resumed-exchanges-render-as-live-ones ()
  "A newcomer's finding: resumed exchanges were greyed raw markup (*bold*, ~code~).
Without org loaded they are plain at first and rendered at the first idle
moment; the inputs are inputs, which RET puts back at the prompt."
  (amacs-shell-test--with-shell
    (let ((rendered nil))
      (setf (amacs-wire-status (amacs-connection-wire (amacs-current-connection)))
            '(:recent ((:human "show me" :agent "It is *bold* and ~code~.")) :key-ok t))
      (let ((amacs--render-preload-queue nil)
            (amacs--render-preload-timer nil))
        (cl-letf (((symbol-function 'featurep) (lambda (f &rest _) (not (eq f 'org))))
                  ((symbol-function 'run-with-idle-timer) (lambda (&rest _) nil)))
          (amacs-shell--greet))
        ;; Rendered once org is preloaded: the last piece of the preload.
        (should (functionp (car (last amacs--render-preload-queue)))))
      (should (string-match-p "It is \\*bold\\* and ~code~\\." (amacs-shell-test--text)))
      (cl-letf (((symbol-function 'amacs-render-org)
                 (lambda (text) (setq rendered text) (propertize text 'font-lock-face 'bold))))
        (amacs-shell--render-resumed (amacs-current-connection)))
      (should (equal rendered "It is *bold* and ~code~."))
      (should (eq (amacs-shell-test--face-at "It is") 'bold))
      (should-not (text-property-not-all (point-min) (point-max) 'amacs-unrendered nil))
      (should-error (progn (goto-char (point-min)) (search-forward "It is") (insert "x"))
                    :type 'text-read-only)
      (should (eq (amacs-shell-test--face-at "show me") 'comint-highlight-input))
      (goto-char (point-min))
      (search-forward "show me")
      (amacs-shell-return)
      (should (string-suffix-p "amacs> show me" (amacs-shell-test--text)))))
  (amacs-shell-test--with-shell          ; with org loaded, rendered at once
    (require 'org)
    (amacs--render-work-buffer)
    (amacs-test-with-status '(:recent ((:human "q" :agent "A *bold* word.")) :key-ok t)
      (amacs-shell--greet))
    (should (string-match-p "A \\*bold\\* word" (amacs-shell-test--text)))
    (should (memq 'bold (ensure-list (amacs-shell-test--face-at "bold"))))))

(ert-deftest amacs-shell-test-set-model-says-what-is-missing ()
  "A newcomer's finding: `amacs-set-model' to a URL said \"Now using … at URL\" and
nothing of the key the server still lacks."
  (amacs-shell-test--with-shell
    (amacs-test-with-status '(:backend "anthropic" :model "m")
      (cl-letf (((symbol-function 'amacs-call)
                 (lambda (_method _args callback &rest _)
                   (funcall callback '(:backend "anthropic" :model "m" :key-ok nil
                                                :missing "No API key for http://127.0.0.1:1 (ANTHROPIC_BASE_URL): set ANTHROPIC_API_KEY.")))))
        (amacs-set-model "anthropic" "m" "http://127.0.0.1:1"))
      (should (string-match-p
               ";; Now using m on anthropic at http://127\\.0\\.0\\.1:1\\. No API key for http://127\\.0\\.0\\.1:1"
               (amacs-shell-test--text)))
      (cl-letf (((symbol-function 'amacs-call)
                 (lambda (_method _args callback &rest _)
                   (funcall callback '(:backend "openai" :model "l" :key-ok t)))))
        (amacs-set-model "openai" "l" "http://localhost:11434/v1"))
      (should (string-match-p ";; Now using l on openai at http://localhost:11434/v1\\.\n"
                              (amacs-shell-test--text))))))

(ert-deftest amacs-shell-test-expanded-forms-are-printed-as-code-is-written ()
  "A newcomer's finding: an expanded form read \"(goto-char\" and \"(point-max))\" on two lines.
A list that fits stays on its line; one that does not breaks as code is indented."
  (should (equal (amacs-shell--pp (read "(progn (goto-char (point-max)) (insert \"x\") (let ((a 1)) a))") 50)
                 "(progn\n  (goto-char (point-max))\n  (insert \"x\")\n  (let ((a 1)) a))"))
  (should (equal (amacs-shell--pp (read "(progn (goto-char (point-max)) (insert \"x\"))") 60)
                 "(progn (goto-char (point-max)) (insert \"x\"))"))
  (should (equal (amacs-shell--pp (read "(defun f (a b) \"Doc.\" (when (and a b (> a 100000000)) (message \"big %s\" a)))") 40)
                 "(defun f (a b)\n  \"Doc.\"\n  (when (and a b (> a 100000000))\n    (message \"big %s\" a)))"))
  (should (equal (amacs-shell--pp (read "(setq x '(aaaaaaaaaa bbbbbbbbbbbb cccccccccccc dddddddddd))") 30)
                 "(setq x\n      '(aaaaaaaaaa\n        bbbbbbbbbbbb\n        cccccccccccc\n        dddddddddd))"))
  (amacs-shell-test--with-shell         ; the eval line's details show it so
    (let ((amacs-eval-confirm nil))
      (amacs-shell-test--eval "(progn (goto-char (point-max)) (ignore \"a string long enough to break the line here\"))"))
    (should (string-match-p "\n(progn\n  (goto-char (point-max))\n  (ignore"
                            (amacs-shell-test--text)))))

(ert-deftest amacs-shell-test-the-turn-is-the-shells-own-state ()
  "The turn is one state in the shell buffer, moved only by `amacs-shell--transition'.
Killing the shell stops its header's clock; a new shell opened while
a turn goes on says the agent is thinking."
  (amacs-shell-test--with-shell
    (should (local-variable-p 'amacs-shell--turn-of-buffer))
    (should (eq (amacs-shell-state) 'starting))
    (amacs-shell--transition 'turn-start)
    (should (and amacs-shell-busy (eq (amacs-shell-state) 'thinking)))
    (amacs-shell--transition 'retry 2.5)
    (should (equal (amacs-shell-turn-detail (amacs-shell--turn)) 2.5))
    (should-error (amacs-shell--transition 'no-such-event))
    (let ((clock (amacs-shell-turn-clock (amacs-shell--turn))))
      (should (memq clock timer-list))
      (setq-local kill-buffer-query-functions nil)
      (kill-buffer)
      (should-not (memq clock timer-list)))
    (should amacs-shell-busy)               ; the server's turn goes on without the shell
    (with-current-buffer (get-buffer-create amacs-shell-buffer-name)
      (amacs-shell-mode)
      (should (eq (amacs-shell-state) 'starting))
      (amacs-shell--transition 'ready)
      (should (eq (amacs-shell-state) 'thinking))
      (amacs-shell--transition 'turn-done)
      (should (and (not amacs-shell-busy) (eq (amacs-shell-state) 'waiting)))
      (should-not (amacs-shell-turn-clock (amacs-shell--turn)))
      (kill-buffer))))

(ert-deftest amacs-shell-test-tab-goes-over-thinking-and-tool-lines-too ()
  "TAB, S-TAB and read-only hold for every folded line: thinking, eval, tool call."
  (amacs-shell-test--with-shell
    (amacs-shell--on-reply '(:text "Before."))
    (amacs-shell--on-thinking-delta '(:type "thinking-delta" :text "I should add."))
    (let ((amacs-eval-confirm nil))
      (cl-letf (((symbol-function 'y-or-n-p) #'ignore))
        (amacs-shell--eval-start '(:agent "primary" :form "(agent-tool \"t/add\" :a 1)"))
        (amacs-shell--tool-line "t/add" '(:a 1) "2" nil 0.01)
        (amacs-shell--eval-done '(:agent "primary") '(:success t :result "2"))))
    (amacs-shell--on-reply '(:text "After."))
    (goto-char (point-min))
    (amacs-shell-tab)                   ; on a reply: to the first folded line
    (dolist (line '("▸ thinking" "▸ eval (agent-tool" "▸ tool t/add → \"2\""))
      (should (looking-at (regexp-quote line)))
      (should-error (insert "x") :type 'text-read-only)
      (amacs-shell-next-eval 1))
    (should (looking-at "▸ tool"))     ; no later one: point stays
    (amacs-shell-tab)                   ; on the tool line: its arguments and result
    (should-not (invisible-p (save-excursion (search-forward "arguments:") (match-beginning 0))))
    (amacs-shell-previous-eval 1)
    (should (looking-at "▸ eval (agent-tool"))
    (amacs-shell-previous-eval 1)
    (should (looking-at "▸ thinking"))))

(ert-deftest amacs-shell-test-c-d-at-the-end-is-no-error ()
  "C-d at the end of the input does nothing, and fails not: keys typed after a failed command are discarded."
  (amacs-shell-test--with-shell
    (goto-char (point-max))
    (should (eq (key-binding (kbd "C-d")) #'amacs-shell-delete-char))
    (call-interactively #'amacs-shell-delete-char)            ; no error at the end
    (insert "abc")
    (goto-char (- (point-max) 2))
    (amacs-shell-delete-char 5)                                ; deletes what there is
    (should (string-suffix-p "amacs> a" (amacs-shell-test--text)))))

;;;; One Emacs, several homes: a connection each

(ert-deftest amacs-shell-test-two-homes-each-shell-its-own-connection ()
  "Two shells on two homes: each event goes to its connection's shell, each command to its own."
  (let* ((amacs-home (make-temp-file "amacs-home-a" t))
         (other (make-temp-file "amacs-home-b" t))
         (amacs--connections nil) (amacs--current nil) (amacs-shell-busy nil)
         (calls nil) a b)
    (cl-letf (((symbol-function 'amacs-start-server) #'ignore)
              ((symbol-function 'amacs-live-p) (lambda (&optional c) (memq (or c (amacs-current-connection))
                                                                            amacs--connections)))
              ((symbol-function 'amacs-call)
               (lambda (method args &optional callback _errback)
                 (if (eq method 'status)
                     (funcall callback '(:recent nil))  ; a new shell on a live server asks
                   (push (list (amacs-connection-name) method args) calls)))))
      (unwind-protect
          (progn
            (setq a (amacs-shell-open amacs-home) b (amacs-shell-open other))
            (should-not (eq a b))
            (should (equal (buffer-name a) amacs-shell-buffer-name))
            (should (equal (buffer-name b) (format "*amacs-shell: %s*" (abbreviate-file-name other))))
            (let ((conn-a (buffer-local-value 'amacs--buffer-connection a))
                  (conn-b (buffer-local-value 'amacs--buffer-connection b)))
              (should (equal (amacs-connection-home conn-b) other))
              ;; An event is its connection's: B's reply shows in B's shell only.
              (amacs--queue-events conn-b '((:type "turn-start") (:type "reply" :text "Only in B.")))
              (amacs--drain-events conn-b)
              (should (string-match-p "Only in B\\." (with-current-buffer b (buffer-string))))
              (should-not (string-match-p "Only in B\\." (with-current-buffer a (buffer-string))))
              (should (amacs-shell-busy-p conn-b))
              (should-not (amacs-shell-busy-p conn-a))
              (should amacs-shell-busy)           ; any shell's turn
              ;; A command finds the connection from the buffer it runs in.
              (with-current-buffer a (goto-char (point-max)) (insert "to A") (comint-send-input))
              (with-current-buffer b (goto-char (point-max)) (insert "to B") (comint-send-input))
              (should (equal (reverse (mapcar (lambda (c) (list (car c) (caddr c))) calls))
                             (list (list (abbreviate-file-name amacs-home) '("to A"))
                                   (list (abbreviate-file-name other) '("to B")))))
              ;; Each header names its home while both are live.
              (should (string-prefix-p (concat " " (abbreviate-file-name other) " —")
                                       (with-current-buffer b (amacs-shell-header-line 200))))))
        (dolist (buf (list a b))
          (when (buffer-live-p buf)
            (with-current-buffer buf (setq-local kill-buffer-query-functions nil))
            (kill-buffer buf)))))))

;; Was: after C-x k on a fork's shell and "y" to stop its server, the fork's
;; hub stayed open, showing a server that was gone.
(ert-deftest amacs-shell-test-a-stopped-forks-hub-closes-with-its-shell ()
  "The hub of a shell whose server the person stopped with it closes too;
one whose server runs on stays."
  (dolist (stop '(t nil))
    (amacs-test-with-connection connection ()
      (let ((hub (get-buffer-create "*amacs-hub: a fork*"))
            (log (get-buffer-create (amacs-connection-buffer-name connection "abandoned")))
            stopped)
        (setf (amacs-ui-hub (amacs-connection-ui connection)) hub)
        (setf (amacs-life-stop-with-shell (amacs-connection-life connection)) stop)
        (unwind-protect
            (cl-letf (((symbol-function 'amacs-stop-server) (lambda (c) (setq stopped c))))
              (with-temp-buffer
                (setq amacs--buffer-connection connection)
                (amacs-shell--stop-server-with-buffer))
              (should (eq stopped (and stop connection)))
              (should (eq (buffer-live-p hub) (not stop)))
              (should (eq (buffer-live-p log) (not stop))))
          (dolist (buffer (list hub log)) (when (buffer-live-p buffer) (kill-buffer buffer))))))))

(ert-deftest amacs-shell-test-a-talk-to-a-busy-subagent-says-when-it-answers ()
  "A newcomer's finding: the greeting taught @task-1 how far?, which a task at work
reads only once its task is done; the answer came after the next reply, unannounced.
The note says when it answers and under which name."
  (amacs-shell-test--with-shell
    (cl-letf (((symbol-function 'amacs-call)
               (lambda (_method _args callback &rest _)
                 (funcall callback '(:to "task-1" :queued t :paused nil)))))
      (amacs-shell--say-to-agent "task-1" "what did you find?" "@task-1 what did you find?"))
    (should (string-match-p
             ";; task-1 is at work: it reads this once that work is done, then answers here as \\[task-1\\]\\."
             (amacs-shell-test--text)))))

(provide 'amacs-shell-test)
;;; amacs-shell-test.el ends here
