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

;;; Code:

(require 'cl-lib)
;; epc (and deferred, concurrent, ctable: ~50 ms with a garbage collection) is
;; loaded when the first connection is made, while the server starts: the
;; server process starts without waiting for it.
(eval-when-compile (require 'epc))
(require 'amacs-settings)

;;;; The connection's state

(defcustom amacs-sync-call-timeout 10
  "Seconds a synchronous call to the server may take before it fails."
  :type 'number
  :group 'amacs)

(defvar amacs--start-failures 0
  "Servers in a row that stopped before they accepted this Emacs.")

(defvar amacs--start-reason nil
  "The reason last said for a server that did not start, or nil.
A later server that fails for the same reason does not say it again.")

(defvar amacs--manager nil
  "The `epc:manager' of the live connection, or nil.")

(defvar amacs--server-process nil
  "The server process this Emacs started, or nil.")

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

(defun amacs--connecting-p ()
  "Return non-nil while a connection is open and its hello not yet answered."
  (and amacs--manager (not amacs--ready)
       (process-live-p (epc:connection-process (epc:manager-connection amacs--manager)))))

(defun amacs-live-p ()
  "Return non-nil when the server is connected and has accepted this Emacs."
  (and amacs--ready amacs--manager (epc:live-p amacs--manager)))

;;;; Connecting

(defvar amacs-stopped nil
  "While `amacs-disconnect-hook' runs: the notice that the server went, or nil.
A cons (WHAT . THEN): WHAT says what happened (\"AMACS server
stopped (killed)\"), THEN how to go on and, on a line of its own,
where the log is.  A function of the hook that says it itself, with
what of the turn is on disk between the two, sets it to nil: then
nothing more is said.")

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

(defun amacs--connect-port (server-proc port token &optional success)
  "Connect to PORT on 127.0.0.1 and say hello with TOKEN.
SERVER-PROC is the server process this Emacs started, or nil.
SUCCESS, if non-nil, is the line said once the server accepts this Emacs."
  (require 'epc)
  (condition-case err
      (let* ((conn (epc:connect "127.0.0.1" port))
             (mngr (make-epc:manager :server-process server-proc
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
