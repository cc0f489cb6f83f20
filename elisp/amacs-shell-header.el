;;; amacs-shell-header.el --- The AMACS shell's turn, header line and mode line -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; What the shell knows of the agent's turn is one buffer-local
;; struct, `amacs-shell-turn', and every change of it is made in
;; `amacs-shell--transition', whose docstring lists the events and the
;; state each leads to.  The header line says that state (and the
;; model); the mode line says what this session cost against the budget.

;;; Code:

(require 'cl-lib)
(require 'amacs-transport)
(require 'amacs-eval)
(require 'amacs-shell-output)

;;;; The turn's state

(defvar amacs-shell-busy nil
  "Non-nil while an agent works on a turn (or input waits for a server).
Any shell's agent, on any home: each shell's own is `amacs-shell-busy-p'.
Only `amacs-shell--transition' sets it, as it moves a shell's turn.")

(cl-defstruct (amacs-shell-turn (:constructor amacs-shell--new-turn) (:copier nil))
  "What a shell knows of the agent's turn; `amacs-shell--transition' alone changes it.
STATE is what the agent is doing: starting, waiting, preparing,
thinking, streaming, eval, sleeping, retrying or stopped.  DETAIL says
more: what the turn waits on before its model call (preparing), whom
it sleeps on (sleeping), the seconds before the next attempt
\(retrying; nil: now).  SINCE is when STATE began, a float time.
EVAL-AGENT is the agent whose eval Emacs runs, or nil: while it runs
Emacs does nothing else, so the header says so.  ANSWERED-EARLY are
those who answered while the primary's eval ran, before it could sleep
on them.  TAKEN are the inputs the agent took in this turn, newest
first, (LINE . SAVED) each: SAVED when the server confirmed the input
is in agent-chat.org (its write-ahead), and only then does the shell
say it is saved.  REPLIED is non-nil once a reply was shown (the
server writes a reply before it shows it).  WAIT-TIMER ends a sleep at
its timeout; CLOCK redraws the header's seconds while the agent works.
BUSY is non-nil while the agent works on a turn, or input waits for a
server.  STEP is the tick of the turn the agent is on, from 1, of at
most LIMIT (`amacs-max-steps' when the turn began); nil between turns."
  (state 'starting) detail since eval-agent answered-early taken replied wait-timer clock busy
  step limit)

(defvar-local amacs-shell--turn-of-buffer nil
  "This shell's turn, an `amacs-shell-turn'.")

(defun amacs-shell--turn ()
  "Return the shell buffer's turn; without a shell, a fresh one that is dropped."
  (let ((buffer (amacs-shell--buffer)))
    (or (and buffer (buffer-local-value 'amacs-shell--turn-of-buffer buffer))
        (amacs-shell--new-turn))))

(defun amacs-shell-busy-p (&optional connection)
  "Non-nil while CONNECTION's agent works on a turn its shell sent.
Or while input in that shell waits for a server.  CONNECTION defaults
to the current one."
  (let ((buffer (amacs-ui-shell (amacs-connection-ui (or connection (amacs-current-connection))))))
    (and (buffer-live-p buffer)
         (let ((turn (buffer-local-value 'amacs-shell--turn-of-buffer buffer)))
           (and turn (amacs-shell-turn-busy turn))))))

(defun amacs-shell--holds-preload ()
  "Non-nil while a shell's turn waits: org's preload waits for its answer."
  amacs-shell-busy)

(add-hook 'amacs-render-preload-hold-functions #'amacs-shell--holds-preload)

(defun amacs-shell--set-busy (turn busy)
  "Set TURN's BUSY; then `amacs-shell-busy' to whether any shell's turn is."
  (setf (amacs-shell-turn-busy turn) busy)
  (setq amacs-shell-busy (cl-loop for connection in amacs--connections
                                  thereis (and (amacs-shell-busy-p connection) t))))

(defun amacs-shell--transition (event &optional arg)
  "Move the shell's turn on EVENT (with ARG).
Every change of the turn is made here.  The events, and the state each
leads to:
  opened      a shell opened with no server yet: starting
  sent        the person sent input: busy; thinking (starting without
              a server) unless a turn was already on
  turn-start  the server began a turn: busy, thinking
  delta       the reply streams: streaming
  eval-start  ARG's eval runs; the primary's: eval
  eval-end    ARG's eval ended, ARG being (AGENT WAIT TALKS); the
              primary's with a WAIT (`amacs--eval-wait') sleeps on
              those of its TALKS who have not answered yet, else thinks
  answered    ARG (an id, or \"you\") answered: noted during an eval;
              while sleeping on it, one fewer, and none left is thinking
  woke        the sleep's timeout: thinking
  retry       the model call is retried in ARG seconds (nil: now)
  preparing   the model call waits on ARG (words: a tool server to
              start): preparing; nil, the wait ended: thinking
  step        the turn's next tick began, ARG being (STEP . LIMIT)
  taken       the agent took an input, ARG being (LINE . SAVED)
  replied     a reply was shown
  turn-done   waiting: not busy, the turn's inputs and reply forgotten
  ready       a server said hello: waiting, or thinking if busy
  gone        the server went: starting if ARG (inputs wait for the
              next server; still busy), else stopped
  cancelled   inputs that waited for a server were dropped: waiting
  failed      no server could start: stopped"
  (let ((turn (amacs-shell--turn)))
    (pcase event
      ('opened (amacs-shell--enter turn 'starting))
      ('sent (unless (amacs-shell-turn-busy turn)
               (amacs-shell--enter turn (if (amacs-live-p) 'thinking 'starting)))
             (amacs-shell--set-busy turn t))
      ('turn-start (amacs-shell--set-busy turn t)
                   (amacs-shell--enter turn 'thinking))
      ('delta (amacs-shell--enter turn 'streaming))
      ('eval-start (setf (amacs-shell-turn-eval-agent turn) arg)
                   (when (equal arg "primary")
                     (setf (amacs-shell-turn-answered-early turn) nil)
                     (amacs-shell--enter turn 'eval)))
      ('eval-end (setf (amacs-shell-turn-eval-agent turn) nil)
                 (pcase-let ((`(,agent ,wait ,talks) arg))
                   (when (equal agent "primary")
                     (if wait (amacs-shell--sleep turn wait talks) (amacs-shell--enter turn 'thinking)))))
      ('answered (amacs-shell--answered turn arg))
      ('woke (when (eq (amacs-shell-turn-state turn) 'sleeping) (amacs-shell--enter turn 'thinking)))
      ('retry (amacs-shell--enter turn 'retrying arg))
      ('preparing (cond (arg (amacs-shell--enter turn 'preparing arg))
                        ((eq (amacs-shell-turn-state turn) 'preparing) (amacs-shell--enter turn 'thinking))))
      ('step (setf (amacs-shell-turn-step turn) (car arg) (amacs-shell-turn-limit turn) (cdr arg))
             (amacs-shell--update-header))
      ('taken (push arg (amacs-shell-turn-taken turn)))
      ('replied (setf (amacs-shell-turn-replied turn) t))
      ('turn-done (amacs-shell--set-busy turn nil)
                  (setf (amacs-shell-turn-taken turn) nil (amacs-shell-turn-replied turn) nil
                        (amacs-shell-turn-step turn) nil)
                  (amacs-shell--enter turn 'waiting))
      ('ready (amacs-shell--enter turn (if (amacs-shell-turn-busy turn) 'thinking 'waiting)))
      ('gone (amacs-shell--set-busy turn (and arg t))
             (setf (amacs-shell-turn-taken turn) nil (amacs-shell-turn-replied turn) nil
                   (amacs-shell-turn-eval-agent turn) nil (amacs-shell-turn-step turn) nil)
             (amacs-shell--enter turn (if arg 'starting 'stopped)))
      ('cancelled (amacs-shell--set-busy turn nil)
                  (amacs-shell--enter turn 'waiting))
      ('failed (amacs-shell--set-busy turn nil)
               (amacs-shell--enter turn 'stopped))
      (_ (error "No such event of the shell's turn: %S" event)))))

(defun amacs-shell--enter (turn state &optional detail)
  "Put TURN in STATE (with DETAIL) and show it; only for `amacs-shell--transition'.
A sleep's timer ends with any other state; the header's clock runs
while the agent works."
  (unless (and (eq state (amacs-shell-turn-state turn)) (equal detail (amacs-shell-turn-detail turn)))
    (unless (eq state (amacs-shell-turn-state turn))
      (setf (amacs-shell-turn-since turn) (float-time)))
    (setf (amacs-shell-turn-state turn) state (amacs-shell-turn-detail turn) detail)
    (amacs-shell--update-header))
  (when (and (amacs-shell-turn-wait-timer turn) (not (eq state 'sleeping)))
    (cancel-timer (amacs-shell-turn-wait-timer turn))
    (setf (amacs-shell-turn-wait-timer turn) nil))
  (if (memq state '(waiting stopped))
      (when (amacs-shell-turn-clock turn)
        (cancel-timer (amacs-shell-turn-clock turn))
        (setf (amacs-shell-turn-clock turn) nil))
    (let ((buffer (amacs-shell--buffer)))
      (unless (or (amacs-shell-turn-clock turn) (not buffer)) ; a turn without a shell is dropped
        (setf (amacs-shell-turn-clock turn)
              (run-at-time 1 1 #'amacs-shell--update-header buffer))))))

(defun amacs-shell-state ()
  "Return the state of the shell's turn, a symbol (see `amacs-shell-turn')."
  (amacs-shell-turn-state (amacs-shell--turn)))

(defun amacs-shell--sleep (turn wait talks)
  "TURN's primary sleeps on WAIT until its talks are answered; TALKS say by whom.
WAIT is `amacs--eval-wait' and TALKS `amacs--eval-talks' of the eval
that registered it.  The header names those it waits for until each
answers, the wait times out, or the agent does something else."
  (let ((names (let ((answered (amacs-shell-turn-answered-early turn)))
                 (cl-remove-if (lambda (name) (member name answered))
                               (delete-dups (mapcar (lambda (id) (or (cdr (assq id talks))
                                                                     (format "talk %s" id)))
                                                    (plist-get wait :talk-ids))))))
        (timeout (plist-get wait :timeout)))
    (setf (amacs-shell-turn-answered-early turn) nil)
    (amacs-shell--enter turn (if names 'sleeping 'thinking) names)
    (when (amacs-shell-turn-wait-timer turn) (cancel-timer (amacs-shell-turn-wait-timer turn)))
    (setf (amacs-shell-turn-wait-timer turn)
          (and names (numberp timeout)
               (let ((connection (amacs-current-connection)))
                 (run-at-time timeout nil (lambda ()
                                            (setf (amacs-shell-turn-wait-timer turn) nil)
                                            (amacs-with-connection connection
                                              (amacs-shell--transition 'woke)))))))))

(defun amacs-shell--answered (turn who)
  "WHO (an agent's id, or \"you\") answered: TURN's primary waits for one less.
Once everyone has answered, the primary wakes: it is thinking."
  (let ((state (amacs-shell-turn-state turn))
        (waiting-for (amacs-shell-turn-detail turn)))
    (cond ((eq state 'eval) (push who (amacs-shell-turn-answered-early turn)))
          ((and (eq state 'sleeping) (member who waiting-for))
           (let ((left (remove who waiting-for)))
             (amacs-shell--enter turn (if left 'sleeping 'thinking) left))))))

;;;; Header line

(defconst amacs--local-log-tail 16384
  "Bytes read from the end of the local model's log to see what it does.")

(defvar-local amacs-shell--local-log-read nil
  "The local model's log as last read for the header: (SIZE MTIME . WORDS).
The header is drawn at every redisplay; the log is read again only
once it has changed.")

(defun amacs-shell--local-model-reading (home)
  "What the local model of HOME is reading before its first word, or nil.
The log is read again only once its size or time changed
\(`amacs-shell--local-log-read')."
  (let* ((file (expand-file-name "logs/local-model.log" home))
         (attributes (file-attributes file))
         (size (and attributes (file-attribute-size attributes)))
         (mtime (and attributes (file-attribute-modification-time attributes)))
         (seen amacs-shell--local-log-read))
    (when (and attributes (file-readable-p file))
      (unless (and (equal (car seen) size) (equal (cadr seen) mtime))
        (setq seen (cons size (cons mtime (amacs-shell--read-local-log file size)))
              amacs-shell--local-log-read seen))
      (cddr seen))))

(defun amacs-shell--read-local-log (file size)
  "Return llama.cpp's work before its first word, from log FILE of SIZE bytes.
llama.cpp reads the whole prompt before it writes a word: minutes for a
long one on a small machine, while the header would say only thinking.
Its log, logs/local-model.log, names the prompt tokens left to read when
a request shares a beginning with the one before; a server that has
finished no prompt since it started is reading its first."
  (with-temp-buffer
    (insert-file-contents-literally file nil (max 0 (- size amacs--local-log-tail)) size)
    (let* ((last-read (save-excursion (goto-char (point-max))
                                      (re-search-backward "prompt eval time" nil t)))
           (started (save-excursion (goto-char (point-max))
                                    (re-search-backward "Application startup complete" nil t)))
           (left (save-excursion (goto-char (point-max))
                                 (and (re-search-backward
                                       "remaining \\([0-9]+\\) prompt tokens to eval" nil t)
                                      (cons (point) (match-string 1))))))
      (cond ((and left (or (not last-read) (> (car left) last-read)))
             (format "llama.cpp reads %s prompt tokens first" (cdr left)))
            ((and started (or (not last-read) (< last-read started)))
             "llama.cpp reads the whole prompt first")))))

(defun amacs-shell-state-string ()
  "What the agent is doing, in a few words, for the header line."
  (let* ((turn (amacs-shell--turn))
         (since (amacs-shell-turn-since turn))
         (detail (amacs-shell-turn-detail turn))
         (eval-agent (amacs-shell-turn-eval-agent turn))
         (secs (and since (floor (- (float-time) since))))
         (elapsed (if (and secs (>= secs 1)) (format " %ds" secs) ""))
         (all (amacs-shell--get 'amacs-shell--agents))
         (paused (cl-count-if (lambda (a) (equal (plist-get a :state) "paused")) all))
         (agents (- (length all) paused))
         (doing (pcase (amacs-shell-turn-state turn)
                  ('starting "starting the server…")
                  ('waiting (if (and (amacs-status) (not (amacs-status :key-ok)))
                                "no API key: the note below says how to give one"
                              "waiting for you"))
                  ('thinking (concat "thinking…" elapsed
                                     (and secs (>= secs 2) (equal (amacs-status :endpoint) "local")
                                          (let ((reading (amacs-shell--local-model-reading
                                                          (amacs-connection-home (amacs-current-connection)))))
                                            (and reading (concat ", " reading))))))
                  ('preparing (concat detail elapsed))
                  ('streaming (concat "writing…" elapsed))
                  ('eval (if amacs-eval-asking
                             "asks you whether an eval may run (y or n)"
                           (concat "running an eval…" elapsed " " (amacs-shell--stops-it))))
                  ('sleeping (concat "waiting for "
                                     (amacs-shell--names detail) "…" elapsed))
                  ('retrying (if detail (format "retrying in %.1f s" detail) "retrying now"))
                  ('stopped "server stopped: send a message to restart it")
                  (state (format "%s" state)))))
    (when (and eval-agent (not (equal eval-agent "primary")))
      (setq doing (format "%s is running an eval… %s" eval-agent (amacs-shell--stops-it))))
    (concat doing
            (let ((step (amacs-shell-turn-step turn)))
              (if (and step (memq (amacs-shell-turn-state turn) '(preparing thinking streaming eval sleeping retrying)))
                  (format " · tick %d of %d" step (amacs-shell-turn-limit turn))
                ""))
            (if (> agents 0) (format " · %d agent%s working" agents (if (= agents 1) "" "s")) "")
            (if (> paused 0) (format " · %d paused" paused) ""))))

(defun amacs-shell--stops-it ()
  "The words that say which key stops a running eval."
  (substitute-command-keys "(\\[keyboard-quit] stops it)"))

(defun amacs-shell--names (names)
  "NAMES (whom the agent waits for) in a few words: \"you\" is your reply."
  (let* ((words (mapcar (lambda (n) (if (equal n "you") "your reply" n)) names))
         (shown (butlast words (- (length words) 3))))
    (concat (mapconcat #'identity shown ", ")
            (if (> (length words) 3) (format " and %d more" (- (length words) 3)) ""))))

(defun amacs-shell--model-words ()
  "Return the model and its endpoint, for the header: (LONG . SHORT), or nil.
LONG names the backend too, and the endpoint whenever it is not the
provider's own: the demo model is \"demo model\", the local one
\"local: MODEL\", another server \"MODEL (BACKEND @ HOST)\".  SHORT is
the model and that endpoint alone; the demo's is its LONG words too, so
that a fork's header, which gets shorter words, and its source's agree."
  (let ((model (amacs-status :model))
        (backend (amacs-status :backend))
        (endpoint (amacs-status :endpoint)))
    (when model
      (pcase endpoint
        ("demo" (cons "demo model" "demo model"))
        ("local" (let ((words (concat "local: " model))) (cons words words)))
        ('nil (cons (format "%s (%s)" model backend) model))
        (host (cons (format "%s (%s @ %s)" model backend host) (format "%s @ %s" model host)))))))

(defun amacs-shell-header-line (&optional width)
  "The shell's header line: the model, the backend and what the agent is doing.
The home comes first when Emacs talks to several homes, and on a fork,
with the home and tick it was forked from.  The model's endpoint is
named whenever it is not the provider's own (`amacs-shell--model-words').
Wider than WIDTH (default: the shell's window), the least needed words
go first: the backend, then the homes' paths (their folder names stay),
then what a fork is a fork of (\"(fork)\" stays), then the home, then
the model.  What the agent does is what the header is for, and it keeps
the room; the model comes next, so that side by side a fork's header
still says which model it runs on."
  (amacs-with-connection (amacs-shell--connection)
    (let* ((words (amacs-shell--model-words))
           (state (amacs-shell-state-string))
           (homes (amacs-shell--header-homes))
           (width (or width (amacs-shell--header-width))))
      (or (cl-find-if (lambda (line) (<= (string-width line) width))
                      (append
                       (and (car words) (list (concat (car homes) " " (car words) " — " state)))
                       (and (cdr words)
                            (mapcar (lambda (home) (concat home " " (cdr words) " — " state)) homes))
                       (mapcar (lambda (home) (concat home " " state)) homes)))
          (concat " " state)))))

(defun amacs-shell--header-homes ()
  "Which home the header names, from the longest words to none: a list.
The home is named when Emacs talks to several, and always on a fork
\(opened alone too, its header says whose mind it holds: the home, the
tick and, first, the tick's commit, as a rewind of that home uses the
tick's number again).  Shorter, the fork's own path becomes its folder
name, then the commit goes, the origin's path becomes a folder name, then
a fork's origin becomes \"(fork)\", then \"a fork\" stands alone; the
last is the empty string."
  (let* ((fork (amacs-status :fork))
         (name (and (or fork (cdr (amacs-live-connections))) (amacs-connection-name)))
         (folder (and name (file-name-nondirectory (directory-file-name name))))
         (from (and fork (directory-file-name (plist-get fork :from))))
         (tick (and fork (plist-get fork :tick)))
         (commit (and fork (stringp (plist-get fork :commit)) (plist-get fork :commit)))
         (short (and commit (substring commit 0 (min 7 (length commit))))))
    (append
     (cond (fork (delq nil
                       (list (and commit
                                  (format " %s (a fork of %s at tick %s, commit %s) —" name
                                          (abbreviate-file-name from) tick short))
                             (and commit
                                  (format " %s (a fork of %s at tick %s, commit %s) —" folder
                                          (abbreviate-file-name from) tick short))
                             (format " %s (a fork of %s at tick %s) —" name (abbreviate-file-name from) tick)
                             (format " %s (a fork of %s at tick %s) —" name (file-name-nondirectory from) tick)
                             (format " %s (a fork of %s at tick %s) —" folder (file-name-nondirectory from) tick)
                             (format " %s (fork) —" folder)
                             " a fork —")))
           (name (list (concat " " name " —") (concat " " folder " —"))))
     (list ""))))

(defun amacs-shell--header-width ()
  "The columns the shell's header has: its window's body, else 80.
Its body, not its whole width: a window beside another in a terminal
gives its last column to the line between them."
  (let ((window (get-buffer-window (amacs-shell--buffer))))
    (if window (window-body-width window) 80)))

(defun amacs-shell--connection ()
  "The connection of the shell buffer that is current, else the current connection.
Redisplay may draw one shell's header while another connection's event
runs: the header is its own buffer's."
  (if (amacs-connection-p amacs--buffer-connection)
      amacs--buffer-connection
    (amacs-current-connection)))

;;;; Mode line

(defvar-local amacs-shell-usage nil
  "The last tick's usage event: the tick's and the session's tokens and cost.")

(defun amacs-shell-cost-string ()
  "This session's cost and the budget, short enough for 80 columns.
The budget figure is what the agent enforces: everything spent in the
AMACS home since the limit was set, against the limit.  Tokens are in
the hub."
  (let ((session (plist-get amacs-shell-usage :session)))
    (if (not session)
        ""
      (format " %s session · budget %s/%s"
              (amacs-shell--dollars (plist-get session :cost))
              (amacs-shell--dollars (or (plist-get amacs-shell-usage :spent) 0))
              (amacs-shell--dollars (plist-get amacs-shell-usage :budget-limit))))))

(defun amacs-shell--dollars (amount)
  "AMOUNT in dollars: to a tenth of a cent below a dollar, to the cent above."
  (format (if (< amount 0.9995) "$%.3f" "$%.2f") amount))

(defconst amacs-shell-mode-line
  '("%e" mode-line-front-space mode-line-buffer-identification
    "  " (:eval (amacs-shell-cost-string)) "   (" mode-name ")" mode-line-end-spaces)
  "The shell's mode line: its name, this session's cost and the budget.
Short, so the money fits in 80 columns; tokens are in the hub.")

(defun amacs-shell--on-tick (event)
  "Keep the tick's usage from EVENT and show it in the mode line."
  (amacs-shell--set 'amacs-shell-usage event)
  (amacs-shell--update-header))

(defun amacs-shell--on-spending (event)
  "Show the session's cost and the budget spent from EVENT, between ticks.
The last tick's own usage is kept."
  (let ((usage (copy-sequence (or (amacs-shell--get 'amacs-shell-usage) amacs-shell-usage))))
    (dolist (key '(:session :spent :budget-limit))
      (setq usage (plist-put usage key (plist-get event key))))
    (amacs-shell--on-tick usage)))

(provide 'amacs-shell-header)
;;; amacs-shell-header.el ends here
