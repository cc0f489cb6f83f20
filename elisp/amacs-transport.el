;;; amacs-transport.el --- EPC link between Emacs and the AMACS server -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Starts the AMACS server (or connects to a headless one), proves to it
;; that this Emacs is the one it serves (a token passed in the
;; environment), and carries messages both ways.
;;
;; A headless server (`python -m amacs_server --headless') names itself
;; in server.json in the AMACS home: port, pid and the token it made.
;; When no connection exists and that file names a live headless server,
;; `amacs-start-server' connects to it instead of starting another; a
;; file whose pid is dead, or whose port refuses connections, is stale
;; and ignored.
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

;;; Code:

(require 'cl-lib)
(require 'amacs-install)          ; first: M-x amacs-install-server works without epc
;; epc (and deferred, concurrent, ctable: ~50 ms with a garbage collection) is
;; loaded when the first connection is made, while the server starts: the
;; server process starts without waiting for it.
(eval-when-compile (require 'epc))
(require 'json)
(require 'auth-source)

(defgroup amacs nil
  "AMACS: an Emacs-native LLM agent."
  :group 'tools
  :prefix "amacs-")

(defconst amacs--root
  (file-name-directory
   (directory-file-name
    (file-name-directory (or load-file-name buffer-file-name default-directory))))
  "The AMACS source tree: the folder above elisp/.")

(defun amacs--default-server-command ()
  "Return the default command to start the server.
The first that exists of: the checkout's .venv Python with -m
amacs_server (what ./amacs makes); bin/amacs-server in
`amacs-server-venv' (what `amacs-install-server' makes);
amacs-server on PATH (pipx, uv tool install).  When none exists,
just amacs-server, which fails to start with a message that says
how to install the server."
  (let ((python (expand-file-name ".venv/bin/python" amacs--root))
        (installed (amacs-install--server-program)))
    (cond ((file-executable-p python) (list python "-m" "amacs_server"))
          ((file-executable-p installed) (list installed))
          (t (list (or (executable-find "amacs-server") "amacs-server"))))))

(defcustom amacs-server-command (amacs--default-server-command)
  "Command that starts the AMACS server: the program, then its arguments."
  :type '(repeat string)
  :group 'amacs)

(defcustom amacs-home nil
  "The AMACS home folder, or nil for $AMACS_HOME or ~/.agent.
Passed to the server as AMACS_HOME."
  :type '(choice (const :tag "Default" nil) directory)
  :group 'amacs)

(defcustom amacs-api-key nil
  "Anthropic API key for the server, or nil.
When nil, ANTHROPIC_API_KEY from the environment is used, else a
password for host api.anthropic.com from `auth-source'.  The key
goes only into the server's environment."
  :type '(choice (const :tag "From the environment or auth-source" nil)
                 (string :tag "Key")
                 (function :tag "Function returning the key"))
  :group 'amacs)

(defcustom amacs-eval-timeout 30
  "Seconds the agent's eval may run before it is stopped."
  :type 'number
  :group 'amacs)

(defcustom amacs-max-steps 8
  "Ticks one human turn may run while the agent keeps evaluating."
  :type 'integer
  :group 'amacs)

(defcustom amacs-price-table nil
  "Model prices in US dollars per million tokens, overriding the server's own.
Each entry is (MODEL-PREFIX INPUT OUTPUT CACHE-WRITE CACHE-READ); the
longest prefix of the model's name that matches wins."
  :type '(repeat (list (string :tag "Model prefix") (number :tag "Input") (number :tag "Output")
                       (number :tag "Cache write") (number :tag "Cache read")))
  :group 'amacs)

(defcustom amacs-sync-call-timeout 10
  "Seconds a synchronous call to the server may take before it fails."
  :type 'number
  :group 'amacs)

(defcustom amacs-start-attempts 3
  "How many times in a row to start a server that stops before it answers.
Emacs waits 1 s, then 2 s, ... between them; after the last it stops
trying, says why the server did not start, and keeps what waited for it
\(the shell's input: `comint-previous-input' brings it back).  Sending
again, or `amacs-restart', starts a new round."
  :type 'integer
  :group 'amacs)

(defvar amacs--start-failures 0
  "Servers in a row that stopped before they accepted this Emacs.")

(defvar amacs--start-reason nil
  "The reason last said for a server that did not start, or nil.
A later server that fails for the same reason does not say it again.")

(defvar amacs--retry-timer nil
  "Timer that starts the server again after a failed start, or nil.")

(defvar amacs--retry-base 1
  "Seconds before the second start of a round; each further wait doubles.")

(defvar amacs-start-failed-hook nil
  "Hook run when Emacs stops trying to start the server.
What waited for the server was dropped; the shell says its input was
not sent.")

(defvar amacs--manager nil
  "The `epc:manager' of the live connection, or nil.")

(defvar amacs--server-process nil
  "The server process this Emacs started, or nil.")

(defvar amacs--token nil
  "The secret this Emacs gave the server it started.")

(defvar amacs--ready nil
  "Non-nil once the server has accepted this Emacs's hello.")

(defvar amacs--status nil
  "The plist the server returned at hello.")

(defvar amacs--on-ready nil
  "Functions called with no argument once the server is ready.")

(defvar amacs--event-handlers nil
  "Alist of (TYPE . FUNCTION) for events the server sends.
FUNCTION receives the event plist.")

(defvar amacs--event-queue nil
  "Events received from the server and not yet handled, oldest first.")

(defvar amacs--event-timer nil
  "Timer that drains `amacs--event-queue', or nil.")

(defvar amacs-ready-hook nil
  "Hook run each time a server accepts this Emacs (start, restart, reconnect).")

(defvar amacs-disconnect-hook nil
  "Hook run when the server stops or the connection to it is lost.")

(defvar amacs-transport-message-function #'message
  "Function used to tell the person about connection problems.
The shell replaces it so that messages appear in `*amacs-shell*'.")

(defun amacs--say (format-string &rest args)
  "Report FORMAT-STRING with ARGS through `amacs-transport-message-function'."
  (funcall amacs-transport-message-function (apply #'format format-string args)))

(defun amacs--clean (value)
  "Return VALUE with text properties removed from every string in it."
  (cond ((stringp value) (substring-no-properties value))
        ((consp value) (cons (amacs--clean (car value)) (amacs--clean (cdr value))))
        (t value)))

(defun amacs--make-token ()
  "Return a fresh 256-bit secret as hex, read from /dev/urandom."
  (with-temp-buffer
    (unless (and (file-readable-p "/dev/urandom")
                 (eq 0 (call-process "od" nil t nil "-An" "-v" "-tx1" "-N32" "/dev/urandom")))
      (error "Cannot read /dev/urandom to make the server's token"))
    (let ((hex (replace-regexp-in-string "[^0-9a-f]" "" (buffer-string))))
      (unless (= (length hex) 64) (error "Short read from /dev/urandom"))
      hex)))

(defun amacs--api-key ()
  "Return the API key to give the server, or nil."
  (cond ((functionp amacs-api-key) (funcall amacs-api-key))
        ((stringp amacs-api-key) amacs-api-key)
        ((getenv "ANTHROPIC_API_KEY") nil)
        (t (let ((secret (auth-source-pick-first-password :host "api.anthropic.com")))
             (and (stringp secret) (not (string-empty-p secret)) secret)))))

(defvar amacs--secrets nil
  "The secrets given to the server (its token, an API key), for `amacs--scrub'.")

(defun amacs--scrub (text)
  "Return TEXT with every secret replaced by \"[redacted]\".
The secrets are those Emacs gave the server and the API keys in the
environment: no secret is written to any file."
  (dolist (secret (append amacs--secrets
                          (list (getenv "ANTHROPIC_API_KEY") (getenv "OPENAI_API_KEY")))
                  text)
    (when (and (stringp secret) (>= (length secret) 8))
      (setq text (string-replace secret "[redacted]" text)))))

(defvar amacs-chosen nil
  "What the person chose in this Emacs that a restarted server keeps.
A plist: :backend, :model and :base-url (`amacs-set-model'), :budget
\(`amacs-set-budget'), :local (`amacs-use-local-model').  They win
over the environment Emacs started with: a restart keeps the model,
endpoint and budget the person chose.")

(defun amacs--chosen-environment ()
  "The environment entries that give a new server the choices in `amacs-chosen'."
  (let ((backend (plist-get amacs-chosen :backend))
        (url (plist-get amacs-chosen :base-url))
        (budget (plist-get amacs-chosen :budget))
        (local (plist-get amacs-chosen :local))) ; (PYTHON GGUF): the server runs the model (amacs-local.el)
    (delq nil
          (list (and local (concat "AMACS_LOCAL_PYTHON=" (car local)))
                (and local (concat "AMACS_LOCAL_MODEL=" (cadr local)))
                (and backend (concat "AMACS_BACKEND=" backend))
                (and (plist-get amacs-chosen :model) (concat "AMACS_MODEL=" (plist-get amacs-chosen :model)))
                (and url (concat (if (equal backend "openai") "OPENAI_BASE_URL=" "ANTHROPIC_BASE_URL=") url))
                (and budget (format "AMACS_BUDGET_LIMIT=%s" budget))))))

(defun amacs--server-environment (token)
  "Return `process-environment' for a server that must present TOKEN."
  (let ((key (amacs--api-key))
        (env (append (amacs--chosen-environment)
                     (cons (concat "AMACS_TOKEN=" token) process-environment))))
    (setq amacs--secrets (delq nil (list token key)))
    (when key (push (concat "ANTHROPIC_API_KEY=" key) env))
    (when amacs-home (push (concat "AMACS_HOME=" (expand-file-name amacs-home)) env))
    env))

(defun amacs--home-directory ()
  "Return the AMACS home: `amacs-home', else $AMACS_HOME, else ~/.agent."
  (expand-file-name (or amacs-home (getenv "AMACS_HOME") "~/.agent")))

(defun amacs--read-server-info ()
  "Return server.json in the AMACS home as an alist, or nil if there is none."
  (let ((file (expand-file-name "server.json" (amacs--home-directory))))
    (when (file-readable-p file)
      (condition-case nil
          (let ((info (json-read-file file)))
            (and (consp info) info))
        (error nil)))))

(defun amacs--pid-alive-p (pid)
  "Return non-nil when PID is a live process."
  (and (natnump pid) (> pid 0)
       (or (process-attributes pid)
           (eq 0 (ignore-errors (signal-process pid 0))))))

(defun amacs--port-open-p (port)
  "Return non-nil when PORT on 127.0.0.1 accepts a connection."
  (and (natnump port) (> port 0)
       (condition-case nil
           (let ((probe (make-network-process :name "amacs-probe" :host "127.0.0.1"
                                              :service port :noquery t)))
             (delete-process probe)
             t)
         (error nil))))

(defun amacs--live-headless-server ()
  "Return (PORT PID TOKEN) of the live headless server server.json names, or nil.
Live: its pid is a running process and its port accepts a connection.
The token is the one in the file, else $AMACS_TOKEN."
  (let* ((info (amacs--read-server-info))
         (port (alist-get 'port info))
         (pid (alist-get 'pid info))
         (token (or (alist-get 'token info) (getenv "AMACS_TOKEN"))))
    (when (and info (not (memq (alist-get 'headless info) '(nil :json-false)))
               (stringp token) (not (string-empty-p token))
               (amacs--pid-alive-p pid) (amacs--port-open-p port))
      (list port pid token))))

(defun amacs--connecting-p ()
  "Return non-nil while a connection is open and its hello not yet answered."
  (and amacs--manager (not amacs--ready)
       (process-live-p (epc:connection-process (epc:manager-connection amacs--manager)))))

(defun amacs-live-p ()
  "Return non-nil when the server is connected and has accepted this Emacs."
  (and amacs--ready amacs--manager (epc:live-p amacs--manager)))

(defun amacs--settings ()
  "Return the plist of settings sent to the server at hello."
  (list :eval-timeout amacs-eval-timeout :max-steps amacs-max-steps
        :prices (mapcar (lambda (entry)
                          (list :model (nth 0 entry) :input (nth 1 entry) :output (nth 2 entry)
                                :cache-write (nth 3 entry) :cache-read (nth 4 entry)))
                        amacs-price-table)))

(defun amacs-start-server ()
  "Connect to the live headless server, or start one; do not wait.
When server.json in the AMACS home names a live headless server, connect
to it.  Otherwise start the server, which connects when its port is
printed.  Does nothing if a server is already starting or connected."
  (when (and amacs--server-process (not (process-live-p amacs--server-process)))
    (amacs--server-gone amacs--server-process (amacs--end-words amacs--server-process)))
  (unless (or (amacs-live-p) (process-live-p amacs--server-process) (amacs--connecting-p)
              amacs--retry-timer)          ; a start after a failed one waits for it
    (let ((headless (amacs--live-headless-server)))
      (if headless
          (pcase-let ((`(,port ,pid ,token) headless))
            (setq amacs--token token amacs--ready nil)
            (amacs--connect-port
             nil port token
             (format "Connected to the headless AMACS server on port %s (pid %s)." port pid)))
        (amacs--start-server-process)))))

(defun amacs--start-server-process ()
  "Start the server with a fresh token; it connects when its port is printed."
  (setq amacs--token (amacs--make-token) amacs--ready nil)
  (let ((process-environment (amacs--server-environment amacs--token))
        (stderr (get-buffer-create " *amacs-server-stderr*")))
    (with-current-buffer stderr (erase-buffer)) ; what this server writes before its log opens
    (condition-case err
        (setq amacs--server-process
              (make-process :name "amacs-server"
                            :buffer (generate-new-buffer " *amacs-server*")
                            :command amacs-server-command
                            :connection-type 'pipe
                            :noquery t
                            :stderr stderr
                            :filter #'amacs--server-filter
                            :sentinel #'amacs--server-sentinel))
      (file-error
       (amacs--say "Cannot start the AMACS server %S: %s. Install it with M-x amacs-install-server (or run ./amacs once in the checkout), or customize `amacs-server-command'."
                   amacs-server-command (error-message-string err))))
    ;; The connection's library loads while the server imports its own (Python
    ;; takes ~10 times longer), not before the process starts nor after its port line.
    (require 'epc)))

(defun amacs--server-filter (proc output)
  "Read the port from the first line of PROC's OUTPUT, then connect."
  (let ((buf (process-buffer proc)))
    (when (buffer-live-p buf)
      (with-current-buffer buf
        (goto-char (point-max))
        (insert output)
        (goto-char (point-min))
        (when (and (not (process-get proc 'amacs-port))
                   (re-search-forward "\n" nil t))
          (let ((line (string-trim (buffer-substring (point-min) (1- (point))))))
            (if (string-match-p "\\`[0-9]+\\'" line)
                (progn
                  (process-put proc 'amacs-port (string-to-number line))
                  (amacs--connect-port proc (string-to-number line) amacs--token))
              (process-put proc 'amacs-port -1) ; no port will come: read no further line
              (process-put proc 'amacs-explained t)
              (amacs--start-failed-because
               proc (string-remove-prefix "AMACS server error: " line)))))))))

(defun amacs--start-failed-because (proc reason)
  "Note REASON why server PROC did not start; say it unless it was just said."
  (process-put proc 'amacs-error reason)
  (unless (equal reason amacs--start-reason)
    (setq amacs--start-reason reason)
    (amacs--say "The AMACS server did not start: %s" reason)))

(defun amacs--stderr-tail ()
  "The last line the server wrote to stderr before its log opened, or nil."
  (let ((buffer (get-buffer " *amacs-server-stderr*")))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (car (last (seq-remove
                    (lambda (line) (string-match-p "\\`Process .*\\(finished\\|exited\\|killed\\)" line))
                    (split-string (buffer-string) "\n" t "[ \t]+"))))))))

(defvar amacs-stopped nil
  "While `amacs-disconnect-hook' runs: the notice that the server went, or nil.
A cons (WHAT . THEN): WHAT says what happened (\"AMACS server
stopped (killed)\"), THEN how to go on and, on a line of its own,
where the log is.  A function of the hook that says it itself, with
what of the turn is on disk between the two, sets it to nil: then
nothing more is said.")

(defun amacs-server-log ()
  "Return the server's log file."
  (expand-file-name "logs/server.log" (amacs--home-directory)))

(defun amacs--run-disconnect-hook ()
  "Handle the events that came before the connection closed; then run the hook.
Events wait for a timer (`amacs--drain-events'), and a sentinel may run
before it: the shell must know the input the server took and saved
before it says what of the turn is on disk."
  (when amacs--event-timer
    (cancel-timer amacs--event-timer))
  (amacs-release-events)
  (run-hooks 'amacs-disconnect-hook))

(defun amacs--say-stopped (what then)
  "Run `amacs-disconnect-hook'; then say WHAT and THEN unless a hook function did."
  (let ((amacs-stopped (cons what then)))
    (amacs--run-disconnect-hook)
    (when amacs-stopped
      (amacs--say "%s. %s" (car amacs-stopped) (cdr amacs-stopped)))))

(defun amacs--read-the-rest ()
  "Read what the server sent before it went, still held by the connection.
The server process's sentinel can run before the connection's filter
has read the last messages (both are ready when the server is killed)."
  (let ((conn (and amacs--manager (epc:connection-process (epc:manager-connection amacs--manager))))
        (reads 0))
    (while (and (processp conn) (process-live-p conn) (< reads 100)
                (accept-process-output conn 0 nil t))
      (setq reads (1+ reads)))))

(defun amacs--end-words (proc)
  "How dead process PROC ended, in the words its sentinel would get.
Whoever notices the end first says it: the sentinel, or a new start
before the sentinel has run; both name it alike (\"killed\", not
\"signal\")."
  (let ((code (process-exit-status proc)))
    (pcase (process-status proc)
      ('signal (pcase code
                 (9 "killed") (15 "terminated") (2 "interrupt") (1 "hangup")
                 (_ (format "signal %d" code))))
      ('exit (if (eql code 0) "finished" (format "exited abnormally with code %d" code)))
      (status (format "%s" status)))))

(defun amacs--server-gone (proc event)
  "Forget server PROC, which ended with EVENT, and say so once.
Called by its sentinel, or earlier by `amacs-start-server' when input
typed after the connection dropped starts a new server first."
  (unless (process-get proc 'amacs-reported)
    (process-put proc 'amacs-reported t)
    (when (eq proc amacs--server-process)
      (amacs--read-the-rest)
      (setq amacs--ready nil amacs--manager nil amacs--server-process nil))
    ;; The shell first closes what the server left open (a stream, input it
    ;; was sent) and says, in this one notice, what of the turn is on disk.
    (if (process-get proc 'amacs-accepted)
        (amacs--say-stopped (format "AMACS server stopped (%s)" (string-trim event))
                            (format "Send a message to restart it, or M-x amacs-restart.\nLog: %s"
                                    (amacs-server-log)))
      (amacs--run-disconnect-hook)
      ;; It never accepted this Emacs: a failed start, said once.
      (setq amacs--start-failures (1+ amacs--start-failures))
      (unless (process-get proc 'amacs-error)
        (amacs--start-failed-because
         proc (format "%s%s" (string-trim event)
                      (let ((tail (amacs--stderr-tail))) (if tail (concat ": " tail) ""))))))))

(defconst amacs--exit-home-in-use 3
  "The exit status of a server that found its home served by another.
Starting it again cannot help until that server goes, so Emacs does not.")

(defun amacs--start-again (proc)
  "Start a server for what waits for one, after server PROC ended.
After a server that ran: at once.  After one that did not start:
again after a wait that doubles, up to `amacs-start-attempts' starts
in a row; then stop trying, drop what waits, run
`amacs-start-failed-hook'."
  (cond
   ((process-get proc 'amacs-accepted) (amacs-start-server))
   ((eql (process-exit-status proc) amacs--exit-home-in-use)
    (amacs--stop-trying "Not trying again while that server serves the home."))
   ((< amacs--start-failures amacs-start-attempts)
    (let ((delay (* amacs--retry-base (expt 2 (1- amacs--start-failures)))))
      (when (= amacs--start-failures 1)
        (amacs--say "Trying again in %s s (at most %d attempts)." delay amacs-start-attempts))
      (amacs--cancel-retry)
      (setq amacs--retry-timer
            (run-at-time delay nil (lambda ()
                                     (setq amacs--retry-timer nil)
                                     (when amacs--on-ready (amacs-start-server)))))))
   (t
    (amacs--stop-trying
     (format "Stopped trying: the AMACS server did not start in %d attempts. %s"
             amacs--start-failures
             (if (process-get proc 'amacs-explained)
                 "Fix what it said, then send again or M-x amacs-restart."
               (format "Its log may say why: %s. Then send again or M-x amacs-restart."
                       (amacs-server-log))))))))

(defun amacs--stop-trying (why)
  "Start no more servers for what waits: drop it, run the failed hook, say WHY."
  (amacs-cancel-waiting)
  (amacs-reset-start-attempts)
  (run-hooks 'amacs-start-failed-hook)
  (amacs--say "%s" why))

(defun amacs--cancel-retry ()
  "Cancel a pending start after a failed one."
  (when amacs--retry-timer
    (cancel-timer amacs--retry-timer)
    (setq amacs--retry-timer nil)))

(defun amacs-reset-start-attempts ()
  "Begin a new round of attempts to start the server.
A round is up to `amacs-start-attempts' attempts."
  (amacs--cancel-retry)
  (setq amacs--start-failures 0 amacs--start-reason nil))

(defun amacs--server-sentinel (proc event)
  "Report that server PROC ended with EVENT."
  (unless (process-live-p proc)
    (when (or (eq proc amacs--server-process) (not (process-get proc 'amacs-reported)))
      (amacs--server-gone proc event)
      ;; Input typed after the connection dropped but before this sentinel ran
      ;; is waiting for a server: start one, or it would wait for ever.
      (when amacs--on-ready
        (amacs--start-again proc)))
    (when (buffer-live-p (process-buffer proc))
      (kill-buffer (process-buffer proc)))))

(defun amacs--connect-port (server-proc port token &optional success)
  "Connect to PORT on 127.0.0.1 and say hello with TOKEN.
SERVER-PROC is the server process this Emacs started, or nil.
SUCCESS, if non-nil, is the line said once the server accepts this Emacs."
  (require 'epc)
  (condition-case err
      (let* ((conn (epc:connect "127.0.0.1" port))
             (mngr (make-epc:manager :server-process server-proc
                                     :commands amacs-server-command
                                     :title "amacs" :port port :connection conn)))
        (epc:init-epc-layer mngr)
        (set-process-filter (epc:connection-process conn)
                            (lambda (p m) (amacs--connection-filter conn p m)))
        (set-process-sentinel (epc:connection-process conn)
                              (lambda (p e) (amacs--connection-sentinel mngr p e)))
        (setq amacs--manager mngr)
        (deferred:$
          (epc:call-deferred mngr 'hello (list token (emacs-pid) (amacs--settings)))
          (deferred:nextc it
            (lambda (status)
              (when success (amacs--say "%s" success))
              (amacs--hello-accepted status)))
          (deferred:error it
            (lambda (e) (amacs--say "The AMACS server refused this Emacs: %s"
                                    (amacs--remote-error-message e))))))
    (error (amacs--say "Cannot connect to the AMACS server on port %s: %s"
                       port (error-message-string err)))))

(defun amacs--connection-sentinel (mngr proc event)
  "Forget MNGR when its connection PROC closes with EVENT."
  (epc:disconnect (epc:manager-connection mngr))
  (when (and (eq mngr amacs--manager) (not (process-live-p proc)))
    (setq amacs--ready nil amacs--manager nil)
    (unless amacs--server-process
      (amacs--say-stopped (format "Lost the AMACS server (%s)" (string-trim event))
                          "Send a message to reconnect."))))

(defun amacs--hello-accepted (status)
  "Store the server's STATUS plist and run the functions waiting for it."
  (setq amacs--ready t amacs--status status amacs--start-failures 0 amacs--start-reason nil)
  (when amacs--server-process (process-put amacs--server-process 'amacs-accepted t))
  (run-hooks 'amacs-ready-hook)
  (let ((waiting amacs--on-ready))
    (setq amacs--on-ready nil)
    (dolist (fn (reverse waiting)) (funcall fn))))

(defun amacs-cancel-waiting ()
  "Drop every function waiting for the server; return how many there were.
The server goes on starting; nothing runs when it is ready.  The shell's
interrupt calls this, so input typed while the server starts is dropped."
  (prog1 (length amacs--on-ready)
    (setq amacs--on-ready nil)))

(defun amacs-when-ready (fn)
  "Call FN once the server is connected, starting it if needed."
  (if (amacs-live-p)
      (funcall fn)
    (push fn amacs--on-ready)
    (amacs-start-server)))

(defcustom amacs-stop-grace 8
  "Seconds a stopping server may take to finish the tick it is in."
  :type 'number
  :group 'amacs)

(defun amacs-stop-server ()
  "Stop the server this Emacs started and forget the connection.
The server sees the connection close, finishes the tick it is in, and
exits; it is killed only if it takes longer than `amacs-stop-grace'.
What the shell shows of a turn in progress ends at once, by
`amacs-disconnect-hook': its prompt comes back.  Stopped on purpose,
the server is not reported as stopped when it exits."
  (let ((proc amacs--server-process)
        (connected (or amacs--manager amacs--server-process))
        (deadline (+ (float-time) amacs-stop-grace)))
    (setq amacs--server-process nil amacs--ready nil)
    (when amacs--manager
      (ignore-errors (epc:disconnect (epc:manager-connection amacs--manager)))
      (setq amacs--manager nil))
    (when (processp proc) (process-put proc 'amacs-reported t))
    ;; Neither sentinel runs the hook now: the connection's sees no manager,
    ;; the server's a reported process (a headless server's turn never ended).
    (when connected (amacs--run-disconnect-hook))
    (while (and (process-live-p proc) (< (float-time) deadline))
      (accept-process-output proc 0.05))
    (when (process-live-p proc)
      (delete-process proc))))

;;;###autoload
(defun amacs-connect (&optional port token)
  "Connect to a headless server on PORT with TOKEN.
Without arguments, read both from server.json in the AMACS home
\(the token also from $AMACS_TOKEN)."
  (interactive)
  (require 'amacs)                      ; the eval, buffer and shell handlers
  (unless (and port token)
    (let ((info (amacs--read-server-info)))
      (setq port (or port (alist-get 'port info))
            token (or token (alist-get 'token info) (getenv "AMACS_TOKEN")))))
  (unless (and port token)
    (user-error "No port or token in %s: start `python -m amacs_server --headless'"
                (expand-file-name "server.json" (amacs--home-directory))))
  (setq amacs--token token amacs--ready nil)
  (amacs--connect-port nil port token (format "Connected to the AMACS server on port %s." port)))

;;;; Calls to the server

(defun amacs-call (method args &optional callback errback)
  "Call server METHOD with ARGS without waiting.
CALLBACK gets the result; ERRBACK gets an error message string."
  (unless (amacs-live-p) (error "The AMACS server is not connected"))
  (deferred:$
    (epc:call-deferred amacs--manager method (amacs--clean args))
    (deferred:nextc it (lambda (value) (when callback (funcall callback value))))
    (deferred:error it
      (lambda (err)
        (let ((text (amacs--remote-error-message err)))
          (if errback (funcall errback text) (amacs--say "AMACS: %s" text)))))))

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
  "Call server METHOD with ARGS and return its value, waiting on the socket.
If the method fails, signals `amacs-remote-error' with the server's
message as its data; its parent is `error', so a handler of `error'
catches it (`amacs-error-message' gives the message alone).  Signals an
error if no answer comes within `amacs-sync-call-timeout' seconds."
  (unless (amacs-live-p) (error "The AMACS server is not connected"))
  (let* ((mngr amacs--manager)
         (proc (epc:connection-process (epc:manager-connection mngr)))
         (uid (epc:uid))
         (state 'waiting) value
         (d (make-deferred :callback (lambda (x) (setq state 'done value x))
                           :errorback (lambda (e) (setq state 'failed value e))))
         (deadline (+ (float-time) amacs-sync-call-timeout)))
    (setf (epc:manager-sessions mngr) (cons (cons uid d) (epc:manager-sessions mngr)))
    (epc:manager-send mngr 'call uid method (amacs--clean args))
    (while (and (eq state 'waiting) (< (float-time) deadline) (process-live-p proc))
      (accept-process-output proc 0.05 nil t)
      (deferred:flush-queue!))
    (pcase state
      ('done value)
      ('failed (signal 'amacs-remote-error (list (amacs--remote-error-message value))))
      (_ (epc:manager-remove-session mngr uid)
         (error "The AMACS server did not answer %s within %s s" method amacs-sync-call-timeout)))))

;;;; Events from the server

(defvar amacs--event-queue-tail nil
  "The last cons of `amacs--event-queue', so that queueing is O(1).")

(defun amacs--connection-filter (conn _proc string)
  "Read every complete EPC message in STRING from connection CONN.
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
      (cond ((eq (car-safe message) 'amacs-events)
             (amacs--queue-events (nth 2 message)))
            ((consp message)
             (condition-case err
                 (apply #'cc:signal-send (epc:connection-channel conn) message)
               (error (message "AMACS: handling %S failed: %S" (car message) err))))))))

(defun amacs--queue-events (events)
  "Append the list EVENTS to the queue; start the drain timer if none waits."
  (when events
    (let ((cells (copy-sequence events)))
      (if amacs--event-queue
          (setcdr amacs--event-queue-tail cells)
        (setq amacs--event-queue cells))
      (setq amacs--event-queue-tail (last cells))))
  (unless amacs--event-timer
    (setq amacs--event-timer (run-at-time 0 nil #'amacs--drain-events))))

(defun amacs--same-stream-p (a b)
  "Return non-nil when events A and B are deltas of one stream.
Both are \"reply-delta\" and every property but :text is the same."
  (and (equal (plist-get a :type) "reply-delta")
       (equal (plist-get b :type) "reply-delta")
       (stringp (plist-get a :text)) (stringp (plist-get b :text))
       (= (length a) (length b))
       (cl-loop for (key value) on a by #'cddr
                always (or (eq key :text) (equal value (plist-get b key))))))

(defvar amacs--events-held nil
  "Non-nil while events wait in their queue: see `amacs-hold-events'.")

(defun amacs-hold-events ()
  "Keep events queued, unhandled, until `amacs-release-events'.
A new shell on a server mid-turn shows the last exchanges first, then
the turn's stream: its deltas wait until the exchanges are shown.  The
connection's end releases them too."
  (setq amacs--events-held t))

(defun amacs-release-events ()
  "Handle the events `amacs-hold-events' kept, and those after them."
  (setq amacs--events-held nil)
  (amacs--drain-events))

(defun amacs--drain-events ()
  "Handle every queued event, oldest first, with every handler of its type.
Consecutive deltas of one stream are handled as one, and not at all when
the streamed reply that replaces them is next.  Nothing while events are
held (`amacs-hold-events')."
  (setq amacs--event-timer nil)
  (while (and amacs--event-queue (not amacs--events-held))
    (let* ((event (pop amacs--event-queue))
           (handlers (alist-get (plist-get event :type) amacs--event-handlers
                                nil nil #'equal)))
      (when (and amacs--event-queue (amacs--same-stream-p event (car amacs--event-queue)))
        (let ((texts (list (plist-get event :text))))
          (while (and amacs--event-queue (amacs--same-stream-p event (car amacs--event-queue)))
            (push (plist-get (pop amacs--event-queue) :text) texts))
          (setq event (plist-put (copy-sequence event) :text
                                 (apply #'concat (nreverse texts))))))
      (when (and (equal (plist-get event :type) "reply-delta")
                 (equal (plist-get (car amacs--event-queue) :type) "reply")
                 (plist-get (car amacs--event-queue) :streamed))
        ;; The streamed reply replaces the streamed text at once: skip inserting it.
        (setq event (pop amacs--event-queue)
              handlers (alist-get "reply" amacs--event-handlers nil nil #'equal)))
      (unless amacs--event-queue (setq amacs--event-queue-tail nil))
      (unless handlers
        (message "AMACS: unknown event %S" (plist-get event :type)))
      (dolist (handler handlers)
        (condition-case err
            (funcall handler event)
          (error (message "AMACS: handling %s failed: %s"
                          (plist-get event :type) (error-message-string err))))))))

(defun amacs-on-event (type function)
  "Handle server events of TYPE (a string) with FUNCTION of one plist.
Several functions may handle one type; each is added once."
  (let ((handlers (alist-get type amacs--event-handlers nil nil #'equal)))
    (unless (memq function handlers)
      (setf (alist-get type amacs--event-handlers nil nil #'equal)
            (append handlers (list function))))))

(provide 'amacs-transport)
;;; amacs-transport.el ends here
