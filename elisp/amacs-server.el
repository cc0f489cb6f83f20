;;; amacs-server.el --- The AMACS server process: start, stop, start again -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The server process's life: Emacs starts the AMACS server (or finds a
;; headless one), gives it a token in its environment, reads its port
;; from its first line and connects (amacs-transport.el); when the
;; server goes it says so once, and starts it again for what waits.
;;
;; A headless server (`python -m amacs_server --headless') names itself
;; in server.json in the AMACS home: port, pid and the token it made.
;; When no connection exists and that file names a live headless server,
;; `amacs-start-server' connects to it instead of starting another; a
;; file whose pid is dead, or whose port refuses connections, is stale
;; and ignored.
;;
;; Each server serves one home and one connection (`amacs-connection',
;; amacs-transport.el): the process carries its connection
;; (`amacs-connection' process property), so its filter and sentinel
;; work for that one, and a start, a stop or a retry is the current
;; connection's (`amacs-current-connection').
;;
;; A server that stops before it accepts Emacs is started again after a
;; wait that doubles, up to `amacs-start-attempts' times; then Emacs
;; stops trying and says why.

;;; Code:

(require 'cl-lib)
(require 'amacs-install)          ; first: M-x amacs-install-server works without epc
(require 'amacs-warm)
(require 'amacs-settings)
(require 'amacs-transport)
(eval-when-compile (require 'epc))
;; What starts the server process loads little: auth-source (with eieio), json and
;; seq took ~0.15 s before the process could start; auth-source loads when a key is
;; looked up there, and server.json is read with the built-in JSON parser.
(declare-function auth-source-pick-first-password "auth-source" (&rest spec))

;;;; Where the server is and how it starts

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

(defcustom amacs-warm-server (not (equal (getenv "AMACS_WARM") "0"))
  "Whether an interactive Emacs's servers are forked from a warm server.
The warm server is a process of yours that has imported the server
and the model SDK (1.3-2 s of CPU that the first answer waited for)
and forks a server for each start; it outlives Emacs, and exits once
idle for 8 hours (AMACS_WARM_IDLE seconds) or when the server's
sources change.  The first start with none running starts one for the
next and is started as without it.  Used for the checkout's default
`amacs-server-command' only, never in batch Emacs.  Set AMACS_WARM=0
in the environment (or this to nil) to start every server afresh."
  :type 'boolean
  :group 'amacs)

(defconst amacs--launcher-code
  (concat "import sys; sys.path[0] = sys.argv[1].rpartition('/')[0]; "
          "import warm_launch; sys.exit(warm_launch.main(sys.argv[2:]))")
  "Python's `-c' code that runs the launcher named by its first argument.
Imported as a module, its bytecode comes from `__pycache__' (written
by scripts/setup.sh); run as a script, it was compiled at every start:
13-34 ms of CPU on two loaded cores, between Emacs's start of the
server and its port line.")

(defun amacs--server-launch-command ()
  "Return the command to start a server with: `amacs-server-command'.
Run through the warm server's launcher (amacs_server/warm_launch.py,
its path the command's last word) when `amacs-warm-server' says so and
the command is the checkout's Python."
  (let ((launcher (expand-file-name "amacs_server/warm_launch.py" amacs--root)))
    (if (and amacs-warm-server (not noninteractive)
             (equal (cdr amacs-server-command) '("-m" "amacs_server"))
             (file-readable-p launcher))
        (list (car amacs-server-command) "-S" "-c" amacs--launcher-code launcher)
      amacs-server-command)))

(defcustom amacs-api-key nil
  "Anthropic API key for the server, or nil.
When nil, ANTHROPIC_API_KEY from the environment is used, else a
password for host api.anthropic.com from `auth-source'.  The key
goes only into the server's environment."
  :type '(choice (const :tag "From the environment or auth-source" nil)
                 (string :tag "Key")
                 (function :tag "Function returning the key"))
  :group 'amacs)

(defcustom amacs-start-attempts 3
  "How many times in a row to start a server that stops before it answers.
Emacs waits 1 s, then 2 s, ... between them; after the last it stops
trying, says why the server did not start, and keeps what waited for it
\(the shell's input: `comint-previous-input' brings it back).  Sending
again, or `amacs-restart', starts a new round."
  :type 'integer
  :group 'amacs)

(defvar amacs--retry-base 1
  "Seconds before the second start of a round; each further wait doubles.")

(defvar amacs-start-failed-hook nil
  "Hook run when Emacs stops trying to start the server.
What waited for the server was dropped; the shell says its input was
not sent.")

(defcustom amacs-stop-grace 8
  "Seconds a stopping server may take to finish the tick it is in."
  :type 'number
  :group 'amacs)

;;;; Secrets

(defun amacs--api-key ()
  "Return the API key to give the server, or nil."
  (cond ((functionp amacs-api-key) (funcall amacs-api-key))
        ((stringp amacs-api-key) amacs-api-key)
        ((getenv "ANTHROPIC_API_KEY") nil)
        (t (require 'auth-source)
           (let ((secret (auth-source-pick-first-password :host "api.anthropic.com")))
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

;;;; The server's environment and home

(defun amacs--chosen-environment (&optional connection)
  "The environment entries that give a new server CONNECTION's choices.
CONNECTION defaults to the current one; its choices are `amacs-chosen'."
  (let* ((chosen (amacs-life-chosen (amacs-connection-life (or connection (amacs-current-connection)))))
         (backend (plist-get chosen :backend))
         (url (plist-get chosen :base-url))
         (budget (plist-get chosen :budget))
         (window (plist-get chosen :window)) ; the model's window as the person set it
         (local (plist-get chosen :local))) ; (PYTHON GGUF): the server runs the model (amacs-local.el)
    (delq nil
          (list (and (plist-get chosen :demo) "AMACS_DEMO=1") ; the server serves the demo model (amacs-local.el)
                (and local (concat "AMACS_LOCAL_PYTHON=" (car local)))
                (and local (concat "AMACS_LOCAL_MODEL=" (cadr local)))
                (and backend (concat "AMACS_BACKEND=" backend))
                (and (plist-get chosen :model) (concat "AMACS_MODEL=" (plist-get chosen :model)))
                (and url (concat (if (equal backend "openai") "OPENAI_BASE_URL=" "ANTHROPIC_BASE_URL=") url))
                (and budget (format "AMACS_BUDGET_LIMIT=%s" budget))
                (and window (format "AMACS_CONTEXT_WINDOW=%d" window))))))

(defun amacs--server-environment (token &optional connection)
  "Return `process-environment' for CONNECTION's server, which must present TOKEN.
The server serves CONNECTION's home (default: the current connection's)."
  (let* ((connection (or connection (amacs-current-connection)))
         (key (amacs--api-key)))
    (setq amacs--secrets (cl-remove-duplicates (append (delq nil (list token key)) amacs--secrets)
                                               :test #'equal :from-end t))
    (amacs--environment-with token (amacs-connection-home connection) key
                             (amacs--chosen-environment connection))))

(defun amacs--read-server-info (&optional connection)
  "Return server.json in CONNECTION's home as an alist, or nil if there is none."
  (let ((file (expand-file-name "server.json"
                                (amacs-connection-home (or connection (amacs-current-connection))))))
    (when (file-readable-p file)
      (condition-case nil
          (let ((info (with-temp-buffer
                        (insert-file-contents file)
                        (json-parse-buffer :object-type 'alist :null-object nil :false-object :json-false))))
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

(defun amacs--live-headless-server (&optional connection)
  "Return (PORT PID TOKEN) of the live headless server of CONNECTION's home.
Nil if there is none.  Its server.json names it.  Live: its pid is a
running process and its port accepts a connection.  The token is the
one in the file, else $AMACS_TOKEN."
  (let* ((info (amacs--read-server-info connection))
         (port (alist-get 'port info))
         (pid (alist-get 'pid info))
         (token (or (alist-get 'token info) (getenv "AMACS_TOKEN"))))
    (when (and info (not (memq (alist-get 'headless info) '(nil :json-false)))
               (stringp token) (not (string-empty-p token))
               (amacs--pid-alive-p pid) (amacs--port-open-p port))
      (list port pid token))))

(defun amacs-server-log (&optional connection)
  "Return the log file of CONNECTION's server (default: the current one's)."
  (expand-file-name "logs/server.log"
                    (amacs-connection-home (or connection (amacs-current-connection)))))

(defun amacs-server-process (&optional connection)
  "Return the server process this Emacs started for CONNECTION, or nil.
CONNECTION defaults to the current one."
  (amacs-life-process (amacs-connection-life (or connection (amacs-current-connection)))))

;;;; Starting

(defun amacs-start-server (&optional connection)
  "Open CONNECTION (default: the current one): find its server or start one.
When server.json in its home names a live headless server, connect to
it.  Otherwise start the server, which connects when its port is
printed.  Does nothing if a server is already starting or connected;
does not wait."
  (let* ((connection (or connection (amacs-current-connection)))
         (life (amacs-connection-life connection))
         (proc (amacs-life-process life)))
    (amacs-with-connection connection
      (when (and proc (not (process-live-p proc)))
        (amacs--server-gone proc (amacs--end-words proc)))
      (unless (or (amacs-live-p connection)
                  (process-live-p (amacs-life-process life))
                  (amacs--connecting-p connection)
                  (amacs-life-retry-timer life)) ; a start after a failed one waits for it
        (let ((headless (amacs--live-headless-server connection)))
          (if headless
              (pcase-let ((`(,port ,pid ,token) headless))
                (amacs--expect-hello connection token)
                (amacs--connect-port
                 connection nil port token
                 (format "Connected to the headless AMACS server on port %s (pid %s)." port pid)))
            (amacs--start-server-process connection)))))))

(defun amacs--expect-hello (connection token)
  "Note that CONNECTION's next server must show TOKEN; it has not accepted yet."
  (setf (amacs-life-token (amacs-connection-life connection)) token)
  (setf (amacs-wire-ready (amacs-connection-wire connection)) nil))

(defun amacs--stderr-buffer-name (connection)
  "The name of the buffer of what CONNECTION's server writes to stderr."
  (if (equal (amacs-connection-home connection)
             (directory-file-name (amacs--home-directory)))
      " *amacs-server-stderr*"
    (format " *amacs-server-stderr %s*" (amacs-connection-home connection))))

(defun amacs--take-early-start ()
  "Return (DIR . TOKEN) of the server ./amacs asked for as Emacs started, or nil.
From AMACS_EARLY and AMACS_EARLY_TOKEN, which are then removed from the
environment: the first start alone takes that server, and no other
program gets its token.  The launcher (amacs_server/warm_launch.py)
finds it by DIR and takes it when this Emacs asks for the same server,
with TOKEN as its token."
  (let ((dir (getenv "AMACS_EARLY"))
        (token (getenv "AMACS_EARLY_TOKEN")))
    (when (or dir token)
      (setenv "AMACS_EARLY" nil)
      (setenv "AMACS_EARLY_TOKEN" nil))
    (and dir token (>= (length token) 32) (cons dir token))))

(defun amacs--start-server-process (&optional connection)
  "Start CONNECTION's server with a fresh token.
It connects when the server prints its port.  Through the warm
server's launcher, Emacs asks the warm server itself first (see
`amacs--ask-warm-server'); the launcher runs when that one does not
answer, and for the first start when ./amacs asked for the server
early: it takes that server, with its token (see
`amacs--take-early-start').  A server ./amacs asked for before the
client loaded (`amacs-ask-warm-first') is taken when it was asked for
as this one would be, with its token; otherwise it is stopped first."
  (let* ((connection (or connection (amacs-current-connection)))
         (command (amacs--server-launch-command))
         (warm (string-suffix-p "warm_launch.py" (car (last command))))
         (early (and warm (amacs--take-early-start)))
         (first (plist-get amacs--asked-first :token))
         (token (or (cdr early) first (amacs--make-token)))
         (process-environment (append (and early (list (concat "AMACS_EARLY=" (car early))))
                                      (amacs--server-environment token connection)))
         (asked (amacs--take-asked-first (and warm (not early) (car command))))
         (stderr (get-buffer-create (amacs--stderr-buffer-name connection))))
    (if (and first (not asked))
        (amacs--start-server-process connection) ; asked for otherwise: its token is not this server's
      (amacs--expect-hello connection token)
      (with-current-buffer stderr (erase-buffer)) ; what this server writes before its log opens
      (setf (amacs-life-process (amacs-connection-life connection))
            (or (and asked (amacs--serve-from-warm (plist-get asked :process) connection command stderr))
                (and warm (not early)
                     (amacs--ask-warm-server connection (car command) command stderr))
                (amacs--start-process connection command stderr))))
    ;; The connection's library loads while the server imports its own (Python
    ;; takes ~10 times longer), not before the process starts nor after its port
    ;; line, and after the command that started it (a timer): the shell's prompt
    ;; is shown first (M-x amacs-shell -> prompt: 281 -> 129 ms, load ~10).
    ;; Connecting requires it again, and says so if it is missing.
    (run-at-time 0 nil (lambda () (amacs--require-epc t)))))

(defun amacs--start-process (connection command stderr)
  "Start COMMAND as CONNECTION's server, its stderr into buffer STDERR.
Return the process, or nil (said) when COMMAND cannot run."
  (condition-case err
      (let ((proc (make-process :name "amacs-server"
                                :buffer (generate-new-buffer " *amacs-server*")
                                :command command
                                :connection-type 'pipe
                                :noquery t
                                :stderr stderr
                                :filter #'amacs--server-filter
                                :sentinel #'amacs--server-sentinel)))
        (process-put proc 'amacs-connection connection)
        (process-put proc 'amacs-stderr stderr)
        proc)
    (file-error
     (amacs-with-connection connection
       (amacs--say "Cannot start the AMACS server %S: %s. Install it with M-x amacs-install-server (or run ./amacs once in the checkout), or customize `amacs-server-command'."
                   amacs-server-command (error-message-string err)))
     nil)))

;;;; A server forked by the warm server, asked for by Emacs itself

(defun amacs--ask-warm-server (connection python command stderr)
  "Ask the warm server of PYTHON for CONNECTION's server.
Return the connection to the warm server, or nil.
No Python process starts: the warm server forks the server and passes
on what it writes, its pid and its end (`amacs--warm-filter').  When it
answers nothing (none runs, or its sources changed), COMMAND (the
launcher) starts the server, its stderr into buffer STDERR.  The
server stops as Emacs closes this connection (`delete-process', or
Emacs gone)."
  (let ((socket (amacs--warm-socket python)))
    (when (and socket (file-exists-p socket) (file-directory-p default-directory)
               (not (file-remote-p default-directory)))
      (let ((proc (amacs--open-warm socket (amacs--warm-request))))
        (and proc (amacs--serve-from-warm proc connection command stderr))))))

(defun amacs--serve-from-warm (proc connection command stderr)
  "Make PROC, a connection to the warm server, CONNECTION's server; return PROC.
What it answers is read from now on (`amacs--warm-filter'); when it
answers nothing, COMMAND starts the server, its stderr into buffer
STDERR (`amacs--warm-sentinel')."
  (process-put proc 'amacs-connection connection)
  (process-put proc 'amacs-stderr stderr)
  (process-put proc 'amacs-launcher (list command process-environment))
  (set-process-filter proc #'amacs--warm-filter)
  (set-process-sentinel proc #'amacs--warm-sentinel)
  (continue-process proc)
  proc)

(defun amacs--take-asked-first (python)
  "Take the server `amacs-ask-warm-first' asked for; return its plist, or nil.
Returned when it was asked for as CONNECTION's server would be now (the
warm server of PYTHON, the same request with its token, which
`process-environment' here must hold); otherwise, or with no PYTHON,
stopped, its end waited for (it holds its home's lock), and nil."
  (let ((first amacs--asked-first))
    (setq amacs--asked-first nil)
    (when first
      (let ((proc (plist-get first :process)))
        (if (and python (process-live-p proc)
                 (equal (plist-get first :socket) (amacs--warm-socket python))
                 (equal (plist-get first :request) (amacs--warm-request)))
            first
          (amacs--stop-asked-first proc)
          nil)))))

(defun amacs--stop-asked-first (proc)
  "Stop the server asked for on PROC, which nobody took, and wait for its end.
It stops once its end of the connection is closed for writing; the warm
server then closes the connection.  At most `amacs-stop-grace' + 4 s."
  (let ((deadline (+ (float-time) amacs-stop-grace 4)))
    (set-process-filter proc #'ignore)
    (set-process-sentinel proc #'ignore)
    (ignore-errors (process-send-eof proc))
    (continue-process proc)
    (while (and (process-live-p proc) (< (float-time) deadline))
      (accept-process-output proc 0.05))
    (let ((buffer (process-buffer proc)))
      (delete-process proc)
      (when (buffer-live-p buffer) (kill-buffer buffer)))))

(defun amacs--read-frames (data)
  "The warm server's messages in unibyte DATA.
Return ((KIND . PAYLOAD) ...) . REST.
Each is a byte KIND (?p its pid, ?o stdout, ?e stderr, ?s its wait
status), PAYLOAD's length (4 bytes, big-endian), PAYLOAD; REST is the
start of one not yet whole."
  (let ((frames nil) (start 0))
    (while (and (>= (- (length data) start) 5)
                (let ((size (+ (ash (aref data (+ start 1)) 24) (ash (aref data (+ start 2)) 16)
                               (ash (aref data (+ start 3)) 8) (aref data (+ start 4)))))
                  (when (>= (- (length data) start 5) size)
                    (push (cons (aref data start) (substring data (+ start 5) (+ start 5 size))) frames)
                    (setq start (+ start 5 size))))))
    (cons (nreverse frames) (substring data start))))

(defun amacs--warm-filter (proc output)
  "Take the warm server's messages about the server of PROC from OUTPUT."
  (pcase-let ((`(,frames . ,rest) (amacs--read-frames (concat (process-get proc 'amacs-frames) output))))
    (process-put proc 'amacs-frames rest)
    (dolist (frame frames)
      (pcase (car frame)
        (?p (process-put proc 'amacs-pid (string-to-number (cdr frame))))
        (?o (amacs--server-filter proc (decode-coding-string (cdr frame) 'utf-8)))
        (?e (let ((stderr (process-get proc 'amacs-stderr)))
              (when (buffer-live-p stderr)
                (with-current-buffer stderr
                  (goto-char (point-max))
                  (insert (decode-coding-string (cdr frame) 'utf-8))))))
        (?s (process-put proc 'amacs-wait-status (string-to-number (cdr frame))))))))

(defun amacs--warm-sentinel (proc event)
  "Report that the server of PROC ended, with EVENT.
As `amacs--server-sentinel' does.
When the warm server answered nothing (no pid), start the server with
the launcher instead: it starts afresh, and a new warm server."
  (unless (process-live-p proc)
    (let ((connection (amacs--process-connection proc)))
      (if (and (not (process-get proc 'amacs-pid)) (not (process-get proc 'amacs-reported))
               (eq proc (amacs-life-process (amacs-connection-life connection))))
          (pcase-let ((`(,command ,process-environment) (process-get proc 'amacs-launcher)))
            (process-put proc 'amacs-reported t)
            (when (buffer-live-p (process-buffer proc))
              (kill-buffer (process-buffer proc)))
            (setf (amacs-life-process (amacs-connection-life connection))
                  (amacs--start-process connection command (process-get proc 'amacs-stderr))))
        (amacs--server-sentinel proc (if (process-get proc 'amacs-pid) (amacs--end-words proc) event))))))

(defun amacs--server-end (proc)
  "How dead server PROC ended.
Return (signal . NUMBER), (exit . CODE), or (STATUS . CODE).
A server the warm server forked for Emacs ended as its wait status
says; without one, the warm server went too (the launcher said 1)."
  (if (eq (process-type proc) 'network)
      (let ((status (process-get proc 'amacs-wait-status)))
        (cond ((null status) '(exit . 1))
              ((/= (logand status 127) 0) (cons 'signal (logand status 127)))
              (t (cons 'exit (logand (ash status -8) 255)))))
    (cons (process-status proc) (process-exit-status proc))))

(defun amacs--process-connection (proc)
  "The connection server PROC serves; else the current one."
  (or (process-get proc 'amacs-connection) (amacs-current-connection)))

(defun amacs--server-filter (proc output)
  "Read the port from the first line of PROC's OUTPUT, then connect.
The server prints its port before it has built its runtime; one that
cannot build it prints a second line, \"AMACS server error: REASON\",
as one that fails before the port prints it first, and stops."
  (let ((buf (process-buffer proc))
        (connection (amacs--process-connection proc)))
    (when (buffer-live-p buf)
      (with-current-buffer buf
        (goto-char (point-max))
        (insert output)
        (goto-char (point-min))
        (while (and (not (eql (process-get proc 'amacs-port) -1))
                    (re-search-forward "\n" nil t))
          (let ((line (string-trim (buffer-substring (point-min) (1- (point))))))
            (delete-region (point-min) (point))
            (cond
             ((and (not (process-get proc 'amacs-port)) (string-match-p "\\`[0-9]+\\'" line))
              (process-put proc 'amacs-port (string-to-number line))
              (amacs--connect-port connection proc (string-to-number line)
                                   (amacs-life-token (amacs-connection-life connection))))
             ((or (not (process-get proc 'amacs-port))
                  (string-prefix-p "AMACS server error: " line))
              (process-put proc 'amacs-port -1) ; no port will come, or it is no use: read no further line
              (process-put proc 'amacs-explained t)
              (amacs--start-failed-because
               proc (string-remove-prefix "AMACS server error: " line))))))))))

(defun amacs--start-failed-because (proc reason)
  "Note REASON why server PROC did not start; say it unless it was just said."
  (let ((connection (amacs--process-connection proc)))
    (process-put proc 'amacs-error reason)
    (unless (equal reason (amacs-life-reason (amacs-connection-life connection)))
      (setf (amacs-life-reason (amacs-connection-life connection)) reason)
      (amacs-with-connection connection
        (amacs--say "The AMACS server did not start: %s" reason)))))

(defun amacs--stderr-tail (proc)
  "The last line server PROC wrote to stderr before its log opened, or nil."
  (let ((buffer (or (process-get proc 'amacs-stderr)
                    (get-buffer (amacs--stderr-buffer-name (amacs--process-connection proc))))))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (car (last (cl-remove-if
                    (lambda (line) (string-match-p "\\`Process .*\\(finished\\|exited\\|killed\\)" line))
                    (split-string (buffer-string) "\n" t "[ \t]+"))))))))

(defun amacs-when-ready (fn)
  "Call FN once the current connection's server is ready, starting it if needed.
FN runs with that connection in effect."
  (let ((connection (amacs-current-connection)))
    (if (amacs-live-p connection)
        (amacs-with-connection connection (funcall fn))
      (let ((origin (amacs--call-origin)))   ; the caller's, not the filter's that runs FN
        (push (lambda () (let ((amacs--queued-origin origin)) (funcall fn)))
              (amacs-life-on-ready (amacs-connection-life connection))))
      (amacs-start-server connection))))

;;;###autoload
(defun amacs-connect (&optional port token home)
  "Connect to a headless server on PORT with TOKEN.
Without them, read both from server.json in the AMACS home (the token
also from $AMACS_TOKEN): HOME if given, else the current connection's.
Interactively, with a prefix argument, ask for HOME."
  (interactive
   (list nil nil (and current-prefix-arg
                      (read-directory-name "AMACS home served by a headless server: "))))
  (require 'amacs)                      ; the eval, buffer and shell handlers
  (let ((connection (if home (amacs-connection-for home) (amacs-current-connection))))
    (unless (and port token)
      (let ((info (amacs--read-server-info connection)))
        (setq port (or port (alist-get 'port info))
              token (or token (alist-get 'token info) (getenv "AMACS_TOKEN")))))
    (unless (and port token)
      (user-error (substitute-command-keys
                   "No port or token in %s: start `python -m amacs_server --headless' there, or connect to another home with \\[universal-argument] \\[amacs-connect]")
                  (expand-file-name "server.json" (amacs-connection-home connection))))
    (amacs--expect-hello connection token)
    (amacs--connect-port connection nil port token
                         (if home
                             (format "Connected to the AMACS server of %s on port %s: M-x amacs-shell-open shows its shell."
                                     (amacs-connection-name connection) port)
                           (format "Connected to the AMACS server on port %s." port)))))

;;;; Stopping, and starting again

(defun amacs--read-the-rest (connection)
  "Read what CONNECTION's server sent before it went, still held by the connection.
The server process's sentinel can run before the connection's filter
has read the last messages (both are ready when the server is killed)."
  (let* ((mngr (amacs-wire-manager (amacs-connection-wire connection)))
         (conn (and mngr (epc:connection-process (epc:manager-connection mngr))))
         (reads 0))
    (while (and (processp conn) (process-live-p conn) (< reads 100)
                (accept-process-output conn 0 nil t))
      (setq reads (1+ reads)))))

(defun amacs--end-words (proc)
  "How dead process PROC ended, in the words its sentinel would get.
Whoever notices the end first says it: the sentinel, or a new start
before the sentinel has run; both name it alike (\"killed\", not
\"signal\")."
  (pcase-let ((`(,status . ,code) (amacs--server-end proc)))
    (pcase status
      ('signal (pcase code
                 (9 "killed") (15 "terminated") (2 "interrupt") (1 "hangup")
                 (_ (format "signal %d" code))))
      ('exit (if (eql code 0) "finished" (format "exited abnormally with code %d" code)))
      (status (format "%s" status)))))

(defun amacs--server-gone (proc event)
  "Forget server PROC, which ended with EVENT, and say so once.
Called by its sentinel, or earlier by `amacs-start-server' when input
typed after the connection dropped starts a new server first."
  (let ((connection (amacs--process-connection proc)))
    (unless (process-get proc 'amacs-reported)
      (process-put proc 'amacs-reported t)
      (when (eq proc (amacs-life-process (amacs-connection-life connection)))
        (amacs--read-the-rest connection)
        (amacs--wire-closed connection)
        (setf (amacs-life-process (amacs-connection-life connection)) nil))
      ;; The shell first closes what the server left open (a stream, input it
      ;; was sent) and says, in this one notice, what of the turn is on disk.
      (if (process-get proc 'amacs-accepted)
          (amacs--say-stopped connection (format "AMACS server stopped (%s)" (string-trim event))
                              (format "Send a message to restart it, or M-x amacs-restart.\nLog: %s"
                                      (amacs-server-log connection)))
        (amacs--run-disconnect-hook connection)
        ;; It never accepted this Emacs: a failed start, said once.
        (cl-incf (amacs-life-failures (amacs-connection-life connection)))
        (unless (process-get proc 'amacs-error)
          (amacs--start-failed-because
           proc (format "%s%s" (string-trim event)
                        (let ((tail (amacs--stderr-tail proc))) (if tail (concat ": " tail) "")))))))))

(defconst amacs--exit-home-in-use 3
  "The exit status of a server that found its home served by another.
Starting it again cannot help until that server goes, so Emacs does not.")

(defun amacs--start-again (proc)
  "Start a server for what waits for one, after server PROC ended.
After a server that ran: at once.  After one that did not start:
again after a wait that doubles, up to `amacs-start-attempts' starts
in a row; then stop trying, drop what waits, run
`amacs-start-failed-hook'."
  (let* ((connection (amacs--process-connection proc))
         (failures (amacs-life-failures (amacs-connection-life connection))))
    (amacs-with-connection connection
      (cond
       ((process-get proc 'amacs-accepted) (amacs-start-server connection))
       ((eql (cdr (amacs--server-end proc)) amacs--exit-home-in-use)
        (amacs--stop-trying connection "Not trying again while that server serves the home."))
       ((< failures amacs-start-attempts)
        (let ((delay (* amacs--retry-base (expt 2 (1- failures)))))
          (when (= failures 1)
            (amacs--say "Trying again in %s s (at most %d attempts)." delay amacs-start-attempts))
          (amacs--cancel-retry connection)
          (let ((life (amacs-connection-life connection)))
            (setf (amacs-life-retry-timer life)
                  (run-at-time delay nil (lambda ()
                                           (setf (amacs-life-retry-timer life) nil)
                                           (when (amacs-life-on-ready life)
                                             (amacs-start-server connection))))))))
       (t
        (amacs--stop-trying
         connection
         (format "Stopped trying: the AMACS server did not start in %d attempts. %s"
                 failures
                 (if (process-get proc 'amacs-explained)
                     "Fix what it said, then send again or M-x amacs-restart."
                   (format "Its log may say why: %s. Then send again or M-x amacs-restart."
                           (amacs-server-log connection))))))))))

(defun amacs--stop-trying (connection why)
  "Start no more servers for what waits on CONNECTION.
Drop it, run `amacs-start-failed-hook', say WHY."
  (amacs-with-connection connection
    (amacs-cancel-waiting)
    (amacs-reset-start-attempts connection)
    (run-hooks 'amacs-start-failed-hook)
    (amacs--say "%s" why)))

(defun amacs--cancel-retry (connection)
  "Cancel CONNECTION's pending start after a failed one."
  (let ((life (amacs-connection-life connection)))
    (when (amacs-life-retry-timer life)
      (cancel-timer (amacs-life-retry-timer life))
      (setf (amacs-life-retry-timer life) nil))))

(defun amacs-reset-start-attempts (&optional connection)
  "Begin a new round of attempts to start CONNECTION's server.
A round is up to `amacs-start-attempts' attempts.  CONNECTION defaults
to the current one."
  (let ((connection (or connection (amacs-current-connection))))
    (amacs--cancel-retry connection)
    (let ((life (amacs-connection-life connection)))
      (setf (amacs-life-failures life) 0 (amacs-life-reason life) nil))))

(defun amacs--server-sentinel (proc event)
  "Report that server PROC ended with EVENT."
  (let ((connection (amacs--process-connection proc)))
    (unless (process-live-p proc)
      (when (or (eq proc (amacs-life-process (amacs-connection-life connection)))
                (not (process-get proc 'amacs-reported)))
        (amacs--server-gone proc event)
        ;; Input typed after the connection dropped but before this sentinel ran
        ;; is waiting for a server: start one, or it would wait for ever.
        (when (amacs-life-on-ready (amacs-connection-life connection))
          (amacs--start-again proc)))
      (when (buffer-live-p (process-buffer proc))
        (kill-buffer (process-buffer proc))))))

(defun amacs-stop-server (&optional connection)
  "Stop the server this Emacs started for CONNECTION and close CONNECTION.
CONNECTION defaults to the current one.  The server sees the
connection close, finishes the tick it is in, and exits; it is killed
only if it takes longer than `amacs-stop-grace'.  What the shell shows
of a turn in progress ends at once, by `amacs-disconnect-hook': its
prompt comes back.  Stopped on purpose, the server is not reported as
stopped when it exits."
  (let* ((connection (or connection (amacs-current-connection)))
         (proc (amacs-life-process (amacs-connection-life connection)))
         (mngr (amacs-wire-manager (amacs-connection-wire connection)))
         (connected (or mngr proc))
         (deadline (+ (float-time) amacs-stop-grace)))
    (setf (amacs-life-process (amacs-connection-life connection)) nil)
    (when mngr
      (ignore-errors (epc:disconnect (epc:manager-connection mngr))))
    (amacs--wire-closed connection)
    (when (processp proc) (process-put proc 'amacs-reported t))
    ;; Neither sentinel runs the hook now: the connection's sees no manager,
    ;; the server's a reported process (a headless server's turn never ended).
    (when connected (amacs--run-disconnect-hook connection))
    (while (and (process-live-p proc) (< (float-time) deadline))
      (accept-process-output proc 0.05))
    (when (process-live-p proc)
      (delete-process proc))))

(provide 'amacs-server)
;;; amacs-server.el ends here
