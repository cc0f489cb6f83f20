;;; amacs-transport.el --- EPC link between Emacs and the AMACS server -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The connection between Emacs and an AMACS server: proves to it that
;; this Emacs is the one it serves (the token it was given, in a hello
;; that also carries the agent's settings), and carries messages both
;; ways.  The server process itself (start, stop, start again) is
;; amacs-server.el's.
;;
;; Everything on an interactive path is asynchronous.  Where elisp needs
;; a value now (a harness function called inside the agent's eval),
;; `amacs--call-sync' waits on the connection itself and flushes
;; deferred's queue, instead of the stock `epc:call-sync' and its
;; 150 ms polling (ARCHITECTURE.md, The transport: EPC's known defects).  Strings sent to the server
;; lose their text properties first (defect 7).
;;
;; Events from the server are one-way messages, (amacs-events 0 EVENTS),
;; that Emacs never answers.  The connection's own process filter
;; (`amacs--connection-filter') reads them and queues them for one
;; timer, `amacs--drain-events', which runs them in order outside the
;; filter (an eval calls the server synchronously on this connection);
;; no `deferred' queue is involved.  Every other message (returns to
;; Emacs's calls) goes to epc.el's dispatcher as before.  Emacs cannot
;; set TCP_NODELAY on its socket (no such option in Emacs 28), so it
;; never sends two messages where one does: no answers to events.
;;
;; A connection is an object, `amacs-connection', one per AMACS home
;; (as jsonrpc.el's `jsonrpc-process-connection' is one per server):
;; the home, and three parts with one job each: the wire (the EPC
;; link, the hello's status, the event queue, the wire log), the life
;; of the server process Emacs started for it (what waits for it, its
;; failed starts, what the person chose) and the UI it serves (the
;; shell and hub buffers that show it).  One Emacs may hold
;; several, on several homes.  Code finds the connection it works for
;; with `amacs-current-connection': the one whose event, callback or
;; hook is running (`amacs-with-connection'), else the current buffer's
;; (a shell or hub records its own), else the one for `amacs-home'.

;;; Code:

(require 'cl-lib)
(require 'ring)
;; epc (and deferred, concurrent, ctable: ~50 ms with a garbage collection) is
;; loaded when the first connection is made, while the server starts: the
;; server process starts without waiting for it.
(eval-when-compile (require 'epc))
(require 'amacs-settings)

;;;; The connection object

;; A connection is three parts, each with one job, and the home they
;; serve: its wire (the EPC link, the hello, the events read and not yet
;; handled, the wire log), the life of its server process (started,
;; failed, started again; what waits for it and what the person chose
;; for it) and the UI it serves (the buffers that show it).

(cl-defstruct (amacs-wire (:constructor amacs--make-wire) (:copier nil))
  "The EPC link of one connection: what passes between Emacs and its server.
MANAGER is the `epc:manager' of the open link, or nil.  READY is
non-nil once the server accepted this Emacs's hello, and STATUS is the
plist it answered with.  SETTINGS-SENT are the settings the server was
last given (nil: no hello yet, which sends them), and SETTINGS-ORIGIN
where a change to one came from when no key of the person's made it
\(`amacs--note-setting-change'), until it is sent.  QUEUE (with its last
cons QUEUE-TAIL) holds the events read and not yet handled, oldest
first; DRAIN-TIMER drains it; HELD keeps them queued
\(`amacs-hold-events').  LOG is the ring of the newest messages, both
ways (`amacs-events')."
  manager ready status settings-sent settings-origin queue queue-tail drain-timer held log)

(cl-defstruct (amacs-life (:constructor amacs--make-life) (:copier nil))
  "The life of one connection's server process: started, failed, started again.
PROCESS is the server process this Emacs started, or nil (none, or a
headless server); TOKEN the secret the server was given and must be
shown at hello.  ON-READY are functions waiting for the server, newest
first.  CHOSEN is what the person chose for this home that a restarted
server keeps (`amacs-set-model', `amacs-set-budget',
`amacs-use-local-model', `amacs-demo'): a plist of :backend, :model,
:base-url, :budget, :local and :demo; it wins over the environment
Emacs started with.  FAILURES counts servers in a row that stopped
before they accepted this Emacs, REASON is the reason last said for
one, RETRY-TIMER starts the next.  STOP-WITH-SHELL is non-nil when
killing the home's shell stops the server.  KNOWN-FILES is, per agent
of this server, what it last read or wrote of each file
\(`amacs-read-before-write')."
  process token on-ready chosen (failures 0) reason retry-timer stop-with-shell
  (known-files (make-hash-table :test #'equal)))

(cl-defstruct (amacs-ui (:constructor amacs--make-ui) (:copier nil))
  "The buffers that show one connection, and what they keep of it.
SHELL and HUB are its shell and hub, or nil; EVENTS the buffer of its
wire log while open (`amacs-events').  SHELL-BUSY is whether the
shell's turn was busy, for a shell made again (its mode restarted);
CHANGES the changes the turn's evals made, not yet listed
\(amacs-changes.el); CHANGED the ▸ changed lines the shell showed, by
the tick their turn ended at, to show again with their turns, and the
first tick whose turn this Emacs saw (`amacs-changes-kept')."
  shell hub events shell-busy changes changed)

(cl-defstruct (amacs-connection (:constructor amacs--make-connection) (:copier nil))
  "This Emacs's connection to the AMACS server of one home.
HOME is the AMACS home, an absolute directory name without a final
slash.  WIRE is its `amacs-wire', the link; LIFE its `amacs-life', the
server process's; UI its `amacs-ui', the buffers that show it."
  home (wire (amacs--make-wire)) (life (amacs--make-life)) (ui (amacs--make-ui)))

(defcustom amacs-home nil
  "The AMACS home folder, or nil for $AMACS_HOME or ~/.agent.
Passed to the server as AMACS_HOME.  The connection of a command run
outside a shell or hub is this home's (`amacs-current-connection')."
  :type '(choice (const :tag "Default" nil) directory)
  :group 'amacs)

(defun amacs--home-directory ()
  "Return the AMACS home: `amacs-home', else $AMACS_HOME, else ~/.agent."
  (expand-file-name (or amacs-home (getenv "AMACS_HOME") "~/.agent")))

(defvar amacs--connections nil
  "Every connection this Emacs made, one per home, newest first.")

(defvar amacs--current nil
  "The connection in effect, or nil: see `amacs-with-connection'.")

(defvar-local amacs--buffer-connection nil
  "The connection this buffer shows (a shell or a hub), or nil.")
(put 'amacs--buffer-connection 'permanent-local t) ; a mode's restart keeps it

(defmacro amacs-with-connection (connection &rest body)
  "Run BODY with CONNECTION in effect.
Every call to the server, every `amacs-when-ready', every buffer it
looks for, is then CONNECTION's.  Events, callbacks and hooks of a
connection run inside it."
  (declare (indent 1) (debug t))
  `(let ((amacs--current ,connection)) ,@body))

(defun amacs-connection-for (home)
  "Return the connection for HOME, making it if this Emacs has none.
The connection is only made, not opened: `amacs-start-server' opens it."
  (let ((key (directory-file-name (expand-file-name home))))
    (or (cl-find-if (lambda (c) (equal (amacs-connection-home c) key)) amacs--connections)
        (car (push (amacs--make-connection :home key) amacs--connections)))))

(defun amacs-connection-buffer-name (connection what &optional default)
  "Return the name of the buffer for WHAT (a string) of CONNECTION's home.
The home `amacs-home' names has DEFAULT, or \=`*amacs-WHAT*'; any
other's names its home, \=`*amacs-WHAT: HOME*', so two homes never
share one."
  (if (equal (amacs-connection-home connection) (directory-file-name (amacs--home-directory)))
      (or default (format "*amacs-%s*" what))
    (format "*amacs-%s: %s*" what (amacs-connection-name connection))))

(defun amacs-current-connection ()
  "Return the connection in effect here.
The one whose event, callback or hook is running; else the current
buffer's (a shell or hub); else the one for `amacs-home'."
  (or amacs--current
      (and (amacs-connection-p amacs--buffer-connection) amacs--buffer-connection)
      (amacs-connection-for (amacs--home-directory))))

(defun amacs-live-connections ()
  "Return the connections whose server has accepted this Emacs, oldest first."
  (reverse (cl-remove-if-not #'amacs-live-p amacs--connections)))

(defun amacs-connection-name (&optional connection)
  "Return the home of CONNECTION (default: the current one), abbreviated."
  (abbreviate-file-name (amacs-connection-home (or connection (amacs-current-connection)))))

(defun amacs-status (&optional key)
  "Return the status the current connection's server gave at hello.
With KEY, return that property of it."
  (let ((status (amacs-wire-status (amacs-connection-wire (amacs-current-connection)))))
    (if key (plist-get status key) status)))

(defun amacs-chosen (&optional key)
  "Return what the person chose for the current connection's home.
With KEY, return that property of it (see `amacs-connection')."
  (let ((chosen (amacs-life-chosen (amacs-connection-life (amacs-current-connection)))))
    (if key (plist-get chosen key) chosen)))

(defun amacs-choose (&rest properties)
  "Keep PROPERTIES (KEY VALUE ...) in the current connection's choices.
A restarted server of its home keeps them."
  (let ((connection (amacs-current-connection)))
    (while properties
      (let ((life (amacs-connection-life connection)))
        (setf (amacs-life-chosen life)
              (plist-put (amacs-life-chosen life) (pop properties) (pop properties)))))))

(defcustom amacs-sync-call-timeout 10
  "Seconds a synchronous call to the server may take before it fails."
  :type 'number
  :group 'amacs)

(defvar amacs--event-handlers nil
  "Alist of (TYPE . FUNCTIONS) for events the server sends.
Each function receives the event plist, with its connection in effect.")

(defvar amacs-ready-hook nil
  "Hook run each time a server accepts this Emacs (start, restart, reconnect).
Its connection is in effect (`amacs-current-connection').")

(defvar amacs-disconnect-hook nil
  "Hook run when the server stops or the connection to it is lost.
Its connection is in effect (`amacs-current-connection').")

(defvar amacs-transport-message-function #'message
  "Function used to tell the person about connection problems.
The shell replaces it so that messages appear in the connection's shell.")

(defun amacs--say (format-string &rest args)
  "Report FORMAT-STRING with ARGS through `amacs-transport-message-function'."
  (funcall amacs-transport-message-function (apply #'format format-string args)))

(defconst amacs-max-call-bytes (* 7 1024 1024)
  "The most bytes of text the arguments of one call to the server may hold.
An EPC message's length is six hex digits (under 16 MiB); printing can
double a string's bytes (each quote and backslash escaped), so a call
whose strings hold more is refused before it is sent.")

(defvar amacs--clean-bytes nil
  "While `amacs--outgoing' cleans, the bytes of the strings seen so far.")

(defun amacs--clean (value)
  "Return VALUE with text properties removed from every string in it."
  (cond ((stringp value)
         (when amacs--clean-bytes
           (setq amacs--clean-bytes (+ amacs--clean-bytes (string-bytes value))))
         (substring-no-properties value))
        ((consp value) (cons (amacs--clean (car value)) (amacs--clean (cdr value))))
        (t value)))

(defun amacs--outgoing (method args)
  "Return ARGS of a call to METHOD, cleaned to be sent.
Signal an error, sending nothing, when their strings hold more than
`amacs-max-call-bytes': a longer message would break the link."
  (let* ((amacs--clean-bytes 0)
         (clean (amacs--clean args)))
    (when (> amacs--clean-bytes amacs-max-call-bytes)
      (error "The call to %s carries %.1f MiB, more than a message to the AMACS server can (%d MiB): \
send less, or a file's name" method (/ amacs--clean-bytes 1048576.0) (/ amacs-max-call-bytes 1048576)))
    clean))

(defun amacs--connecting-p (&optional connection)
  "Return non-nil while CONNECTION is open and its hello not yet answered."
  (let* ((wire (amacs-connection-wire (or connection (amacs-current-connection))))
         (mngr (amacs-wire-manager wire)))
    (and mngr (not (amacs-wire-ready wire))
         (process-live-p (epc:connection-process (epc:manager-connection mngr))))))

(defun amacs-live-p (&optional connection)
  "Return non-nil when CONNECTION's server has accepted this Emacs.
CONNECTION defaults to the current one."
  (let ((connection (or connection (amacs-current-connection))))
    (let ((wire (amacs-connection-wire connection)))
      (and (amacs-wire-ready wire) (amacs-wire-manager wire)
           (epc:live-p (amacs-wire-manager wire))))))

;;;; Connecting

(defvar amacs-stopped nil
  "While `amacs-disconnect-hook' runs: the notice that the server went, or nil.
A cons (WHAT . THEN): WHAT says what happened (\"AMACS server
stopped (killed)\"), THEN how to go on and, on a line of its own,
where the log is.  A function of the hook that says it itself, with
what of the turn is on disk between the two, sets it to nil: then
nothing more is said.")

(defun amacs--run-disconnect-hook (connection)
  "Handle the events that came before CONNECTION closed; then run the hook.
Events wait for a timer (`amacs--drain-events'), and a sentinel may run
before it: the shell must know the input the server took and saved
before it says what of the turn is on disk."
  (let ((timer (amacs-wire-drain-timer (amacs-connection-wire connection))))
    (when timer (cancel-timer timer)))
  (amacs-with-connection connection
    (amacs-release-events)
    (run-hooks 'amacs-disconnect-hook)))

(defun amacs--say-stopped (connection what then)
  "Run CONNECTION's `amacs-disconnect-hook'; then say WHAT and THEN unless it did."
  (let ((amacs-stopped (cons what then)))
    (amacs--run-disconnect-hook connection)
    (when amacs-stopped
      (amacs-with-connection connection
        (amacs--say "%s. %s" (car amacs-stopped) (cdr amacs-stopped))))))

(defvar amacs--connections-opened 0
  "How many connections this Emacs has opened: each one's name has its number.
Not `epc:uid', which numbers the calls: the wire log shows those, and a
connection's name taken from it left a gap there at every start.")

(defun amacs--epc-connect (host port)
  "Return an EPC connection to HOST on PORT, like the one of `epc:connect'.
Opened with `make-network-process': `epc:connect' opens it with
`open-network-stream', whose library loads nsm, auth-source and eieio
\(0.2-0.5 s of Lisp on a loaded machine) before the first hello goes."
  (let* ((name (format "epc con %s" (cl-incf amacs--connections-opened)))
         (buffer (epc:make-procbuf (format "*%s*" name)))
         (process (make-network-process :name name :buffer buffer :host host :service port
                                        :coding 'binary :noquery t))
         (connection (make-epc:connection :name name :process process :buffer buffer
                                          :channel (cc:signal-channel name))))
    (set-process-filter process (lambda (p m) (epc:process-filter connection p m)))
    (set-process-sentinel process (lambda (p e) (epc:process-sentinel connection p e)))
    connection))

(declare-function edmacro-parse-keys "edmacro" (string &optional need-vector))

(defun amacs--plain-key (keys &optional end)
  "Read KEYS as `read-kbd-macro' does, END as there.
One ASCII character, or the return key by its two names, is read here;
other KEYS, or a vector asked for by END, by edmacro, loaded then."
  (cond ((and (not end) (member keys '("RET" "C-m"))) "\r")
        ((and (not end) (= (length keys) 1) (< 32 (aref keys 0) 127)) keys)
        (t (require 'edmacro)
           (edmacro-parse-keys keys end))))

(defun amacs--require-epc (&optional noerror)
  "Load epc as `require' does (NOERROR as there), its plain keys read here.
epc's keymaps and its table library's are made by `read-kbd-macro', whose
edmacro loads kmacro too, before the first answer can be shown.  While epc
loads, `read-kbd-macro' is `amacs--plain-key', unless edmacro is loaded
then: loading it (for a key not plain) defines the real one, kept."
  (cond ((featurep 'epc))
        ((featurep 'edmacro) (require 'epc nil noerror))
        (t (let ((real (symbol-function 'read-kbd-macro)))
             (fset 'read-kbd-macro #'amacs--plain-key)
             (unwind-protect (require 'epc nil noerror)
               (when (eq (symbol-function 'read-kbd-macro) #'amacs--plain-key)
                 (fset 'read-kbd-macro real)))))))

(defun amacs--connect-port (connection server-proc port token &optional success)
  "Open CONNECTION to PORT on 127.0.0.1 and say hello with TOKEN.
SERVER-PROC is the server process this Emacs started, or nil.
SUCCESS, if non-nil, is the line said once the server accepts this Emacs."
  (amacs--require-epc)
  (amacs-with-connection connection
    (condition-case err
        (let* ((conn (amacs--epc-connect "127.0.0.1" port))
               (mngr (make-epc:manager :server-process server-proc
                                       :title "amacs" :port port :connection conn)))
          (epc:init-epc-layer mngr)
          (process-put (epc:connection-process conn) 'amacs-connection connection)
          (set-process-filter (epc:connection-process conn)
                              (lambda (p m) (amacs--connection-filter connection conn p m)))
          (set-process-sentinel (epc:connection-process conn)
                                (lambda (p e) (amacs--connection-sentinel connection mngr p e)))
          (let ((wire (amacs-connection-wire connection)))
            ;; The hello sends the settings, as the program starting it.
            (setf (amacs-wire-manager wire) mngr
                  (amacs-wire-settings-sent wire) (amacs--settings)
                  (amacs-wire-settings-origin wire) nil))
          (deferred:$
            (amacs--send-call connection 'hello (list token (emacs-pid) (amacs--settings))
                              '(:token "(not shown)"))
            (deferred:nextc it
              (lambda (status)
                (amacs--hello-accepted connection status)
                ;; After what the ready hooks show (the shell's last exchanges and notes),
                ;; so that the line is on the first screen, not above it.
                (amacs-with-connection connection
                  (when success (amacs--say "%s" success)))))
            (deferred:error it
              (lambda (e)
                (amacs-with-connection connection
                  (amacs--say "The AMACS server refused this Emacs: %s"
                              (amacs--remote-error-message e)))))))
      (error (amacs--say "Cannot connect to the AMACS server on port %s: %s"
                         port (error-message-string err))))))

(defun amacs--wire-closed (connection)
  "Forget CONNECTION's link: its server has not accepted this Emacs now."
  (let ((wire (amacs-connection-wire connection)))
    (setf (amacs-wire-ready wire) nil (amacs-wire-manager wire) nil)))

(defun amacs--connection-sentinel (connection mngr proc event)
  "Forget MNGR, CONNECTION's manager, when its process PROC closes with EVENT."
  (epc:disconnect (epc:manager-connection mngr))
  (when (and (eq mngr (amacs-wire-manager (amacs-connection-wire connection))) (not (process-live-p proc)))
    (amacs--wire-closed connection)
    (unless (amacs-life-process (amacs-connection-life connection))
      (amacs--say-stopped connection (format "Lost the AMACS server (%s)" (string-trim event))
                          "Send a message to reconnect."))))

(defun amacs--hello-accepted (connection status)
  "Store the server's STATUS plist in CONNECTION; run what waits for it."
  (let ((wire (amacs-connection-wire connection))
        (life (amacs-connection-life connection)))
    (setf (amacs-wire-ready wire) t (amacs-wire-status wire) status
          (amacs-life-failures life) 0 (amacs-life-reason life) nil)
    (when (amacs-life-process life) (process-put (amacs-life-process life) 'amacs-accepted t))
    (amacs-with-connection connection
      (run-hooks 'amacs-ready-hook)
      (let ((waiting (amacs-life-on-ready life)))
        (setf (amacs-life-on-ready life) nil)
        (dolist (fn (reverse waiting)) (funcall fn))))))

(defun amacs-cancel-waiting ()
  "Drop every function waiting for the current connection; return how many.
The server goes on starting; nothing runs when it is ready.  The shell's
interrupt calls this, so input typed while the server starts is dropped."
  (let ((life (amacs-connection-life (amacs-current-connection))))
    (prog1 (length (amacs-life-on-ready life))
      (setf (amacs-life-on-ready life) nil))))

;;;; Calls that act for the person

(defconst amacs--person-methods
  '(submit set_budget set_model interrupt rewind fork
    person_agent_control person_agent_talk person_add_buffer settings)
  "The server's methods that act for the person (docs/ARCHITECTURE.md, Trust).
A call to one carries, as its last argument, where Emacs saw it come
from (`amacs--call-origin'); the server refuses it while an agent's
eval runs, whatever that says.")

(defconst amacs--primarys-own-methods
  '(set_consciousness thread_create thread_switch thread_complete thread_add_buffer
    thread_remove_buffer skill_bind skill_unbind)
  "The agent functions called with no eval id that change the primary's state.
A call to one carries its origin last, as a call for the person does: in
no agent's eval the server lets only a key of the person's or a batch
Emacs's program act as the primary (docs/ARCHITECTURE.md, Trust).")

(defvar amacs-current-eval)
(defvar amacs-current-agent)

(defvar amacs--queued-origin nil
  "Where a call queued until the server was ready came from, while it runs.")

(defconst amacs--waiting-functions
  '(timer-event-handler accept-process-output sit-for sleep-for read-event read-char
    read-char-exclusive read-key read-key-sequence read-from-minibuffer read-string
    completing-read y-or-n-p yes-or-no-p recursive-edit)
  "Functions inside which other code may run: timers, filters, commands.
A call made inside one of them, before any command, is not the command's.")

(defun amacs--person-command-p (command)
  "Return non-nil for a COMMAND of the person's: an AMACS one, or one for Lisp."
  (and (symbolp command)
       (or (string-prefix-p "amacs-" (symbol-name command))
           (memq command '(comint-send-input eval-expression eval-last-sexp eval-print-last-sexp
                           eval-defun pp-eval-expression pp-eval-last-sexp ielm-return)))))

(defun amacs--call-origin ()
  "Where a call that acts for the person comes from, as Emacs sees it: a plist.
:origin is \"eval\" (inside an agent's eval, with :agent and :eval),
\"key\" (a command of the person's, with :command), \"program\" (a batch
Emacs's own program, outside any timer or filter) or \"unknown\" (a timer, a
process filter or a hook: code nobody can say was the person's).  The
server decides; this is what Emacs tells it."
  (cond
   ((bound-and-true-p amacs-current-eval)
    (list :origin "eval" :agent (bound-and-true-p amacs-current-agent) :eval amacs-current-eval))
   (amacs--queued-origin amacs--queued-origin)
   (t
    (let (waited command)
      (mapbacktrace (lambda (_evald fun args _flags)
                      (unless (or waited command)
                        (cond ((memq fun amacs--waiting-functions) (setq waited fun))
                              ((eq fun 'command-execute) (setq command (car args)))))))
      (cond ((and command (amacs--person-command-p command))
             (list :origin "key" :command (symbol-name command)))
            ((and noninteractive (not waited) (not command)) (list :origin "program"))
            (t (list :origin "unknown" :via (symbol-name (or waited command 'hook)))))))))

(defun amacs--call-args (method args)
  "ARGS of METHOD as sent: a call that acts for the person carries its origin last.
So does one that changes the primary's own state."
  (amacs--outgoing method (if (or (memq method amacs--person-methods)
                                   (memq method amacs--primarys-own-methods))
                             (append args (list (amacs--call-origin)))
                           args)))

;;;; The wire log

(defcustom amacs-events-log-size 5000
  "How many messages of each connection the wire log keeps (`amacs-events').
The newest this many messages between Emacs and its server, both ways,
are kept in a ring; 0 keeps none.  A turn of the demo model is 25-60
messages (a streamed reply is a message every few words), a turn of
many steps hundreds: 5000 keep a session's start to read back."
  :type 'natnum
  :group 'amacs)

(defconst amacs--wire-line-chars 400
  "How much of a message a line of the wire log shows.")

(defun amacs--wire-log (connection direction what message)
  "Note MESSAGE on CONNECTION's wire log and return it.
DIRECTION is `out' (sent to the server) or `in' (read from it); WHAT
names the message: \"call submit\", \"event reply-delta\", \"return\"."
  (when (and connection (> amacs-events-log-size 0))
    (let* ((wire (amacs-connection-wire connection))
           (ring (amacs-wire-log wire))
           (entry (list (float-time) direction what message)))
      (unless (and ring (= (ring-size ring) amacs-events-log-size))
        (let ((new (make-ring amacs-events-log-size)))
          (when ring
            (dolist (old (nreverse (ring-elements ring))) (ring-insert new old)))
          (setq ring new)
          (setf (amacs-wire-log wire) ring)))
      (ring-insert ring entry)
      (let ((buffer (amacs-ui-events (amacs-connection-ui connection))))
        (when (buffer-live-p buffer)
          (with-current-buffer buffer
            (let ((inhibit-read-only t) (end (= (point) (point-max))))
              (save-excursion
                (goto-char (point-max))
                (insert (amacs--wire-line entry)))
              (when end (goto-char (point-max)))))))))
  message)

(defun amacs--wire-line (entry)
  "Return the wire log's line for ENTRY, (TIME DIRECTION WHAT MESSAGE)."
  (pcase-let* ((`(,time ,direction ,what ,message) entry)
               (printed (let ((print-length 20) (print-level 6)) (prin1-to-string message))))
    (format "%s.%03d %s %s %s\n"
            (format-time-string "%H:%M:%S" time) (% (truncate (* time 1000)) 1000)
            (if (eq direction 'out) "->" "<-") what
            (truncate-string-to-width (replace-regexp-in-string "\n" "\\\\n" printed)
                                      amacs--wire-line-chars nil nil "..."))))

(define-derived-mode amacs-events-mode special-mode "AMACS-Events"
  "The wire log of one AMACS connection.
It lists the messages between Emacs and its server, the newest last:
\"->\" is sent to the server, \"<-\" read from it.")

;;;###autoload
(defun amacs-events (&optional connection)
  "Show the wire log of CONNECTION (the current one).
It is what passed between Emacs and its server.  The log keeps the
newest `amacs-events-log-size' messages, both ways: calls and their
returns, the events the server sent, the evals it asked for.  The
buffer grows as messages pass while it is open."
  (interactive)
  (let* ((connection (or connection (amacs-current-connection)))
         (buffer (get-buffer-create (amacs-connection-buffer-name connection "events")))
         (ring (amacs-wire-log (amacs-connection-wire connection))))
    (with-current-buffer buffer
      (amacs-events-mode)
      (setq amacs--buffer-connection connection)
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (format ";; The wire log of %s's server and this Emacs, since this Emacs connected \
\(not an earlier Emacs's):
;; its newest %d messages (amacs-events-log-size), -> sent, <- read, the server's restarts included.
;; #N pairs a call with its return: this Emacs numbers its calls (->) across all its servers, \
the server its own (<-).\n"
                        (amacs-connection-name connection) amacs-events-log-size))
        (dolist (entry (and ring (nreverse (ring-elements ring))))
          (insert (amacs--wire-line entry))))
      (goto-char (point-max)))
    (setf (amacs-ui-events (amacs-connection-ui connection)) buffer)
    (pop-to-buffer buffer)
    buffer))

;;;; Calls to the server

(defun amacs-call (method args &optional callback errback)
  "Call METHOD with ARGS on the current connection's server, without waiting.
CALLBACK gets the result; ERRBACK gets an error message string.  Both
run with the connection in effect."
  (let ((connection (amacs-current-connection)))
    (unless (amacs-live-p connection) (error "The AMACS server is not connected"))
    (deferred:$
      (amacs--send-call connection method (amacs--call-args method args))
      (deferred:nextc it
        (lambda (value)
          (when callback (amacs-with-connection connection (funcall callback value)))))
      (deferred:error it
        (lambda (err)
          (let ((text (amacs--remote-error-message err)))
            (amacs-with-connection connection
              (if errback (funcall errback text) (amacs--say "AMACS: %s" text)))))))))

(defun amacs--send-call (connection method args &optional shown)
  "Send a call of METHOD with ARGS on CONNECTION's wire; return its deferred.
As `epc:call-deferred' does; the wire log notes the call with its uid,
which its return names too (SHOWN there in place of ARGS, if given)."
  (let ((mngr (amacs-wire-manager (amacs-connection-wire connection)))
        (uid (epc:uid))
        (d (deferred:new)))
    (amacs--wire-log connection 'out (format "call %s #%s" method uid) (or shown args))
    (setf (epc:manager-sessions mngr) (cons (cons uid d) (epc:manager-sessions mngr)))
    (epc:manager-send mngr 'call uid method args)
    d))

(define-error 'amacs-remote-error "AMACS server error")

(defun amacs-error-message (err)
  "Return the message of the error ERR, a condition caught by `condition-case'.
For `amacs-remote-error' it is the server's message alone, as the server
wrote it; for any other error, what `error-message-string' says."
  (if (and (eq (car-safe err) 'amacs-remote-error) (stringp (cadr err)))
      (cadr err)
    (error-message-string err)))

(defun amacs--remote-error-message (err)
  "Return the server's message in ERR, an error object from epc.
ERR is the message printed as a string (\"\\\"MESSAGE\\\"\"), as epc hands a
method's error over; an epc-error, (epc-error MESSAGE), as it hands a
refused hello over; either inside an error form, (error ERR), as
deferred passes them on; or an `amacs-remote-error' condition."
  (pcase err
    (`(amacs-remote-error ,(and (pred stringp) message) . ,_) message)
    (`(,(or 'error 'epc-error) ,inner . ,_) (amacs--remote-error-message inner))
    ((pred stringp)
     (let ((form (and (string-match-p "\\`[\"(]" err)
                      (condition-case nil
                          (let ((read (read-from-string err)))
                            (and (= (cdr read) (length err)) (car read)))
                        (error nil)))))
       (cond ((stringp form) form)
             ((memq (car-safe form) '(error epc-error)) (amacs--remote-error-message form))
             (t err))))
    (_ (format "%S" err))))

(defun amacs--call-sync (method args)
  "Call METHOD with ARGS on the current connection's server; return its value.
Waits on the connection's socket.  If the method fails, signals
`amacs-remote-error' with the server's message as its data; its parent
is `error', so a handler of `error' catches it (`amacs-error-message'
gives the message alone).  Signals an error if no answer comes within
`amacs-sync-call-timeout' seconds."
  (let ((connection (amacs-current-connection)))
    (unless (amacs-live-p connection) (error "The AMACS server is not connected"))
    (let* ((uid (epc:uid))
           (clean (amacs--wire-log connection 'out (format "call %s #%s (waiting)" method uid)
                                   (amacs--call-args method args)))
           (mngr (amacs-wire-manager (amacs-connection-wire connection)))
           (proc (epc:connection-process (epc:manager-connection mngr)))
           (state 'waiting) value
           (d (make-deferred :callback (lambda (x) (setq state 'done value x))
                             :errorback (lambda (e) (setq state 'failed value e))))
           (deadline (+ (float-time) amacs-sync-call-timeout)))
      (setf (epc:manager-sessions mngr) (cons (cons uid d) (epc:manager-sessions mngr)))
      (epc:manager-send mngr 'call uid method clean)
      (while (and (eq state 'waiting) (< (float-time) deadline) (process-live-p proc))
        (accept-process-output proc 0.05 nil t)
        (deferred:flush-queue!))
      (pcase state
        ('done value)
        ('failed (signal 'amacs-remote-error (list (amacs--remote-error-message value))))
        (_ (epc:manager-remove-session mngr uid)
           (error "The AMACS server did not answer %s within %s s" method amacs-sync-call-timeout))))))

;;;; Events from the server

(defun amacs--note-setting-change (_symbol _value operation where)
  "Note a change to a person's setting that no key of the person's made.
A variable watcher on each of `amacs--setting-variables'; OPERATION and
WHERE as `add-variable-watcher' gives them.  A command of any kind is
the person's; `amacs--eval-keeping-settings' answers for an eval's."
  (when (and (eq operation 'set) (null where))
    (let ((origin (amacs--call-origin)))
      (when (and (equal (plist-get origin :origin) "unknown")
                 (let ((via (plist-get origin :via)))
                   (or (equal via "hook")
                       (memq (intern via) amacs--waiting-functions))))
        ;; Every server is told with that origin: the settings are this Emacs's, not a home's.
        (dolist (connection amacs--connections)
          (setf (amacs-wire-settings-origin (amacs-connection-wire connection)) origin))))))

(dolist (variable amacs--setting-variables)
  (add-variable-watcher variable #'amacs--note-setting-change))

(defun amacs--send-changed-settings ()
  "Give the current connection's server the settings changed since it was told.
Called before each input is sent, so the turn it starts runs by them:
a defcustom set while the server runs would otherwise wait for a
restart.  Synchronous, so the settings arrive before the input (calls
from Emacs run on a pool of threads, in no fixed order).  Return nil,
or the server's words when it refused them."
  (let* ((settings (amacs--settings))
         (wire (amacs-connection-wire (amacs-current-connection)))
         (sent (amacs-wire-settings-sent wire))) ; nil: no hello yet, which sends them
    (unless (or (null sent) (equal settings sent))
      (condition-case err
          (progn (let ((amacs--queued-origin (or (amacs-wire-settings-origin wire) amacs--queued-origin)))
                   (amacs--call-sync 'settings (list settings)))
                 (setf (amacs-wire-settings-sent wire) settings
                       (amacs-wire-settings-origin wire) nil)
                 nil)
        (error (format "%s" (if (stringp (cdr err)) (cdr err) (error-message-string err))))))))

(defun amacs--connection-filter (connection conn _proc string)
  "Read every complete EPC message in STRING from CONNECTION's EPC CONN.
Events, (amacs-events 0 EVENTS), are queued for `amacs--drain-events';
any other message goes to epc.el's dispatcher, as its own filter does."
  (let ((buf (epc:connection-buffer conn)) messages)
    (when (buffer-live-p buf)
      (with-current-buffer buf
        (goto-char (point-max))
        (insert string)
        (let ((start (point-min)) (end (point-max)) length)
          (while (and (>= (- end start) 6)
                      (setq length (string-to-number
                                    (buffer-substring-no-properties start (+ start 6)) 16))
                      (> length 0)
                      (>= (- end start 6) length))
            (push (condition-case err
                      (read (decode-coding-string
                             (buffer-substring-no-properties (+ start 6) (+ start 6 length))
                             'utf-8-unix))
                    (error (message "AMACS: unreadable message from the server: %S" err) nil))
                  messages)
            (setq start (+ start 6 length)))
          (delete-region (point-min) start))))
    (dolist (message (nreverse messages))
      (if (eq (car-safe message) 'amacs-events)
          (dolist (event (nth 2 message))
            (amacs--wire-log connection 'in (format "event %s" (plist-get event :type)) event))
        ;; (return UID VALUE), (return-error UID ERR), (call UID METHOD ARGS): by its uid.
        (amacs--wire-log connection 'in (if (eq (car-safe message) 'call)
                                            (format "call %s #%s" (nth 2 message) (nth 1 message))
                                          (format "%s #%s" (car-safe message) (nth 1 message)))
                         message))
      (cond ((eq (car-safe message) 'amacs-events)
             (amacs--queue-events connection (nth 2 message)))
            ((consp message)
             (condition-case err
                 (amacs-with-connection connection
                   (apply #'cc:signal-send (epc:connection-channel conn) message))
               (error (message "AMACS: handling %S failed: %S" (car message) err))))))))

(defun amacs--queue-events (connection events)
  "Append the list EVENTS to CONNECTION's queue; start its drain if none waits."
  (when events
    (let ((cells (copy-sequence events))
          (wire (amacs-connection-wire connection)))
      (if (amacs-wire-queue wire)
          (setcdr (amacs-wire-queue-tail wire) cells)
        (setf (amacs-wire-queue wire) cells))
      (setf (amacs-wire-queue-tail wire) (last cells))))
  (unless (amacs-wire-drain-timer (amacs-connection-wire connection))
    (setf (amacs-wire-drain-timer (amacs-connection-wire connection))
          (run-at-time 0 nil #'amacs--drain-events connection))))

(defun amacs-hold-events ()
  "Keep the current connection's events queued, unhandled, until released.
A new shell on a server mid-turn shows the last exchanges first, then
the turn's stream: its deltas wait until the exchanges are shown
\(`amacs-release-events').  The connection's end releases them too."
  (setf (amacs-wire-held (amacs-connection-wire (amacs-current-connection))) t))

(defun amacs-release-events ()
  "Handle the events `amacs-hold-events' kept, and those after them."
  (let ((connection (amacs-current-connection)))
    (setf (amacs-wire-held (amacs-connection-wire connection)) nil)
    (amacs--drain-events connection)))

(defun amacs--drain-events (connection)
  "Handle CONNECTION's queued events, oldest first, with every handler of its type.
Each handler runs with CONNECTION in effect; each event is handled as
it came.  The server merges a stream's deltas and drops those a
streamed reply replaces (its `Outbox'): the rule is kept on that side
of the wire only.  Nothing while events are held (`amacs-hold-events')."
  (let ((wire (amacs-connection-wire connection)))
    (setf (amacs-wire-drain-timer wire) nil)
    (amacs-with-connection connection
      (while (and (amacs-wire-queue wire) (not (amacs-wire-held wire)))
        (let* ((event (pop (amacs-wire-queue wire)))
               (handlers (alist-get (plist-get event :type) amacs--event-handlers
                                    nil nil #'equal)))
          (unless (amacs-wire-queue wire)
            (setf (amacs-wire-queue-tail wire) nil))
          (unless handlers
            (message "AMACS: unknown event %S" (plist-get event :type)))
          (dolist (handler handlers)
            (condition-case err
                (funcall handler event)
              (error (message "AMACS: handling %s failed: %s"
                              (plist-get event :type) (error-message-string err))))))))))

(defun amacs-on-event (type function)
  "Handle server events of TYPE (a string) with FUNCTION of one plist.
Several functions may handle one type; each is added once.  FUNCTION
runs with the event's connection in effect."
  (let ((handlers (alist-get type amacs--event-handlers nil nil #'equal)))
    (unless (memq function handlers)
      (setf (alist-get type amacs--event-handlers nil nil #'equal)
            (append handlers (list function))))))

(provide 'amacs-transport)
;;; amacs-transport.el ends here
