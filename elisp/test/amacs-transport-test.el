;;; amacs-transport-test.el --- ERT tests of the EPC fast path -*- lexical-binding: t -*-

;;; Commentary:

;; The connection filter reads one-way event messages, in any split,
;; queues them in order for one drain, and passes other messages to
;; epc.el's dispatcher; the drain hands each event to its handlers as
;; it came (the server merges a stream's deltas, not Emacs).

;;; Code:

(require 'ert)
(require 'epc)
(require 'amacs-transport)
(require 'amacs-server)
(require 'amacs-eval)
(require 'cl-lib)
(require 'amacs-test-helpers)

(defun amacs-transport-test--frame (sexp)
  "Return SEXP framed as an EPC message (length prefix, UTF-8)."
  (let ((body (encode-coding-string (concat (prin1-to-string sexp) "\n") 'utf-8-unix)))
    (concat (format "%06x" (length body)) body)))

(defmacro amacs-transport-test--with-connection (var &rest body)
  "Run BODY with VAR a fake EPC connection, `connection' a fresh AMACS one.
No event handlers but the test's own."
  (declare (indent 1))
  `(amacs-test-with-connection connection ()
     (let* ((buf (generate-new-buffer " *amacs-transport-test*"))
            (,var (make-epc:connection :name "t" :buffer buf :channel (cc:signal-channel "t")))
            (amacs--event-handlers nil))
       (unwind-protect (progn ,@body)
         (when (timerp (amacs-wire-drain-timer (amacs-connection-wire connection)))
           (cancel-timer (amacs-wire-drain-timer (amacs-connection-wire connection))))
         (kill-buffer buf)))))

;; Issue 10 (start-up): the server's Python takes ~10 times longer to start
;; than epc takes to load, so the process is started first and epc loads
;; while it imports; not before it starts, nor after its port line.  As
;; people run it: compiled (loading a source file evaluates what
;; `eval-when-compile' holds).
(ert-deftest amacs-transport-test-the-server-starts-before-epc-loads ()
  "Loading the shell loads no epc; starting the server loads it once the command has ended.
The process starts first and the shell's prompt is drawn before epc loads."
  (let* ((emacs (expand-file-name invocation-name invocation-directory))
         (source (file-name-directory (locate-library "amacs-transport.el")))
         (dir (make-temp-file "amacs-elc" t))
         (setup "(progn (add-to-list 'package-directory-list \"/usr/share/emacs/site-lisp/elpa\")
                        (package-initialize))")
         (check "(progn
  (require 'amacs-shell)
  (princ (format \"loaded:%s \" (featurep 'epc)))
  (advice-add 'make-process :before
              (lambda (&rest _) (princ (format \"spawn:%s \" (featurep 'epc)))))
  (let ((amacs-server-command '(\"sleep\" \"5\")) (amacs-home (make-temp-file \"amacs-home\" t)))
    (amacs--start-server-process)
    (princ (format \"started:%s \" (featurep 'epc)))
    (accept-process-output nil 0.1)
    (princ (format \"idle:%s\" (featurep 'epc)))
    (delete-process (amacs-server-process))))"))
    (unwind-protect
        (progn
          (dolist (file (directory-files source t "\\`amacs.*\\.el\\'"))
            (copy-file file (file-name-as-directory dir)))
          (should (zerop (apply #'call-process emacs nil nil nil "-Q" "--batch" "--eval" setup "-L" dir
                                "-f" "batch-byte-compile"
                                (directory-files dir t "\\`amacs.*\\.el\\'"))))
          (let ((out (with-temp-buffer
                       (call-process emacs nil t nil "-Q" "--batch" "--eval" setup "-L" dir "--eval" check)
                       (buffer-string))))
            (should (string-match-p "loaded:nil spawn:nil started:nil idle:t" out))))
      (delete-directory dir t))))

(ert-deftest amacs-transport-test-connecting-loads-no-network-stream ()
  "Measured: the first hello waited 0.2-0.5 s for `open-network-stream's library.
`epc:connect' opens its stream with it, which loads nsm, auth-source and
eieio; the connection is made with `make-network-process' instead, and
is an EPC connection as `epc:connect' makes it."
  (skip-unless (not (featurep 'network-stream)))
  (let* ((accepted nil)
         (listener (make-network-process :name "amacs-test-listener" :server t :host "127.0.0.1"
                                         :service t :family 'ipv4
                                         :log (lambda (_server client _message) (setq accepted client))))
         (conn (amacs--epc-connect "127.0.0.1" (process-contact listener :service))))
    (unwind-protect
        (progn
          (should-not (featurep 'network-stream))
          (should (epc:connection-p conn))
          (should (process-live-p (epc:connection-process conn)))
          (should (equal (process-coding-system (epc:connection-process conn)) '(binary . binary)))
          (should (buffer-live-p (epc:connection-buffer conn)))
          (process-send-string (epc:connection-process conn) "x")
          (with-timeout (5 (ert-fail "no connection accepted"))
            (while (not accepted) (accept-process-output nil 0.05)))
          (should (process-live-p accepted)))
      (delete-process (epc:connection-process conn))
      (delete-process listener)
      (kill-buffer (epc:connection-buffer conn)))))

;; CI under load saw the server's sentinel run before the connection's
;; filter had read the server's last message (the input it took and saved),
;; and the shell's notice left out that the input is saved.
(ert-deftest amacs-transport-test-what-a-killed-server-sent-is-read-before-it-is-said-gone ()
  "The server went: what it sent and Emacs has not read yet is handled before the hook runs."
  (let* ((accepted nil)
         (listener (make-network-process :name "amacs-test-listener" :server t :host "127.0.0.1"
                                         :service t :family 'ipv4
                                         :log (lambda (_server client _message) (setq accepted client))))
         (buf (generate-new-buffer " *amacs-transport-test*"))
         (client (make-network-process :name "amacs-test-client" :host "127.0.0.1" :family 'ipv4
                                       :service (process-contact listener :service)))
         (conn (make-epc:connection :name "t" :process client :buffer buf
                                    :channel (cc:signal-channel "t")))
         (server (start-process "amacs-test-server" nil "sleep" "30"))
         (seen nil) (seen-by-the-hook 'unset)
         (amacs--event-handlers nil)
         (amacs-transport-message-function #'ignore)
         (amacs-disconnect-hook (list (lambda () (setq seen-by-the-hook seen)))))
    (amacs-test-with-connection
        connection (:process server
                    :manager (make-epc:manager :server-process server :connection conn))
     (unwind-protect
        (progn
          (process-put server 'amacs-connection connection)
          (set-process-filter client (lambda (p m) (amacs--connection-filter connection conn p m)))
          (amacs-on-event "input-taken" (lambda (e) (push (plist-get e :saved) seen)))
          (with-timeout (5 (error "No connection"))
            (while (not accepted) (accept-process-output nil 0.05)))
          (process-send-string accepted (amacs-transport-test--frame
                                         '(amacs-events 0 ((:type "input-taken" :saved t)))))
          (call-process "sleep" nil nil nil "0.2") ; it reaches the socket; Emacs reads nothing meanwhile
          (process-put server 'amacs-accepted t)
          (amacs--server-gone server "killed\n")
          (should (equal seen-by-the-hook '(t))))
      (dolist (p (list server client accepted listener))
        (when (processp p) (delete-process p)))
      (when (timerp (amacs-wire-drain-timer (amacs-connection-wire connection)))
        (cancel-timer (amacs-wire-drain-timer (amacs-connection-wire connection))))
      (kill-buffer buf)))))

(ert-deftest amacs-transport-test-a-server-found-dead-is-named-as-its-sentinel-would ()
  "A start that finds the server dead before its sentinel ran says \"killed\"."
  (let ((proc (make-process :name "amacs-test-sleep" :command '("sleep" "100")
                            :sentinel #'ignore :noquery t)))
    (signal-process proc 'SIGKILL)
    (with-timeout (10 (error "The process did not die"))
      (while (process-live-p proc) (accept-process-output proc 0.05)))
    (should (equal (amacs--end-words proc) "killed"))))

(ert-deftest amacs-transport-test-a-finished-process-is-named-finished ()
  "A process that exited is named by its exit code, as a sentinel's event is."
  (let ((ok (make-process :name "amacs-test-true" :command '("true") :sentinel #'ignore :noquery t))
        (bad (make-process :name "amacs-test-false" :command '("sh" "-c" "exit 3")
                           :sentinel #'ignore :noquery t)))
    (with-timeout (10 (error "The processes did not end"))
      (while (or (process-live-p ok) (process-live-p bad)) (accept-process-output nil 0.05)))
    (should (equal (amacs--end-words ok) "finished"))
    (should (equal (amacs--end-words bad) "exited abnormally with code 3"))))

(ert-deftest amacs-transport-test-events-in-any-split ()
  "Events split across and packed into reads arrive whole, in order, after the filter."
  (amacs-transport-test--with-connection conn
    (let ((seen nil)
          (data (concat (amacs-transport-test--frame '(amacs-events 0 ((:type "t" :n 1) (:type "t" :n 2))))
                        (amacs-transport-test--frame '(amacs-events 0 ((:type "t" :n 3 :s "héllo ✓")))))))
      (amacs-on-event "t" (lambda (e) (push (list (plist-get e :n) (plist-get e :s)) seen)))
      (setq data (encode-coding-string (decode-coding-string data 'utf-8) 'utf-8))
      (dolist (cut (list 3 10 (- (length data) 5)))
        (setq seen nil)
        (amacs--connection-filter connection conn nil (substring data 0 cut))
        (amacs--connection-filter connection conn nil (substring data cut))
        (should-not seen)               ; nothing ran inside the filter
        (should (timerp (amacs-wire-drain-timer (amacs-connection-wire connection))))
        (amacs--drain-events connection)
        (should (equal (nreverse seen) '((1 nil) (2 nil) (3 "héllo ✓"))))
        (should (= 0 (buffer-size (epc:connection-buffer conn))))))))

(ert-deftest amacs-transport-test-other-messages-go-to-epc ()
  "A return is dispatched to epc.el's channel, not queued as an event."
  (amacs-transport-test--with-connection conn
    (let (signalled)
      (cl-letf (((symbol-function 'cc:signal-send)
                 (lambda (_channel &rest message) (push message signalled))))
        (amacs--connection-filter connection conn nil (amacs-transport-test--frame '(return 7 "ok"))))
      (should (equal signalled '((return 7 "ok"))))
      (should-not (amacs-wire-queue (amacs-connection-wire connection))))))

;; M-x amacs-events: the wire log a person can read, as jsonrpc.el's events buffer.
(ert-deftest amacs-transport-test-the-wire-log-shows-what-passed ()
  "Events and returns read by the filter are in the wire log, newest last, one line each."
  (amacs-transport-test--with-connection conn
    (cl-letf (((symbol-function 'cc:signal-send) #'ignore)
              ((symbol-function 'pop-to-buffer) #'ignore))
      (amacs--connection-filter
       connection conn nil
       (concat (amacs-transport-test--frame '(amacs-events 0 ((:type "turn-start") (:type "reply-delta" :text "hé"))))
               (amacs-transport-test--frame '(return 7 "ok"))
               (amacs-transport-test--frame '(call 9 eval ("(+ 1 2)" "e1")))))
      (amacs--wire-log connection 'out "call submit" '("hi" (:origin "key")))
      (let ((buffer (amacs-events connection)))
        (unwind-protect
            (with-current-buffer buffer
              (should (derived-mode-p 'amacs-events-mode))
              (let ((lines (cl-remove-if (lambda (line) (string-prefix-p ";;" line)) ; the header's
                                         (split-string (buffer-string) "\n" t))))
                (should (= (length lines) 5))
                (should (string-match-p "<- event turn-start (:type \"turn-start\")" (nth 0 lines)))
                (should (string-match-p "<- event reply-delta .*:text \"hé\"" (nth 1 lines)))
                (should (string-match-p "<- return #7 (return 7 \"ok\")" (nth 2 lines)))
                (should (string-match-p "<- call eval #9 " (nth 3 lines)))
                (should (string-match-p "-> call submit (\"hi\" (:origin \"key\"))" (nth 4 lines))))
              ;; A message passing while the buffer is open is added at its end.
              (amacs--wire-log connection 'in "event turn-done" '(:type "turn-done"))
              (should (string-match-p "<- event turn-done .*\n\\'" (buffer-string))))
          (kill-buffer buffer))))))

(ert-deftest amacs-transport-test-a-call-and-its-return-name-one-uid-in-the-wire-log ()
  "A call's line did not name its EPC uid: \"<- return (return 4 t)\" was matched to its call
by order alone, wrong when calls overlap.  Each call's line and its return's name one uid."
  (amacs-transport-test--with-connection conn
    (let ((sent nil))
      (setf (amacs-wire-manager (amacs-connection-wire connection)) (make-epc:manager :connection conn))
      (cl-letf (((symbol-function 'epc:manager-send) (lambda (_mngr &rest message) (push message sent)))
                ((symbol-function 'cc:signal-send) #'ignore))
        (amacs--send-call connection 'submit '("one"))
        (amacs--send-call connection 'submit '("two"))
        (let ((first (nth 1 (cadr sent))) (second (nth 1 (car sent))))
          (amacs--connection-filter connection conn nil
                                    (amacs-transport-test--frame (list 'return second t)))
          (should (equal (mapcar (lambda (entry) (nth 2 entry))
                                 (nreverse (ring-elements (amacs-wire-log (amacs-connection-wire connection)))))
                         (list (format "call submit #%s" first) (format "call submit #%s" second)
                               (format "return #%s" second)))))))))

(ert-deftest amacs-transport-test-the-wire-log-is-a-small-ring ()
  "The log keeps the newest `amacs-events-log-size' messages; 0 keeps none."
  (amacs-transport-test--with-connection conn
    (let ((amacs-events-log-size 3))
      (dotimes (i 5) (amacs--wire-log connection 'in "event t" (list :type "t" :n i)))
      (should (equal (mapcar (lambda (e) (plist-get (nth 3 e) :n))
                             (ring-elements (amacs-wire-log (amacs-connection-wire connection))))
                     '(4 3 2))))
    (let ((amacs-events-log-size 0))
      (setf (amacs-wire-log (amacs-connection-wire connection)) nil)
      (amacs--wire-log connection 'in "event t" '(:type "t"))
      (should-not (amacs-wire-log (amacs-connection-wire connection))))))

;; A newcomer read back their demo session in M-x amacs-events and found its start gone: 200
;; messages, when the demo's start and one `slow' reply were 58, a `note' 24 and `help' 40
;; (counted in tmux).
(ert-deftest amacs-transport-test-the-wire-log-keeps-a-session-and-says-how-much ()
  "At the default size, twenty turns of 60 messages are all in the log, whose header says its size and setting."
  (amacs-transport-test--with-connection conn
    (cl-letf (((symbol-function 'pop-to-buffer) #'ignore))
      (let ((amacs-events-log-size (default-value 'amacs-events-log-size)))
        (dotimes (turn 20)
          (amacs--wire-log connection 'out "call submit" (list (format "turn %d" turn)))
          (dotimes (i 59) (amacs--wire-log connection 'in "event reply-delta" (list :type "reply-delta" :text (format "w%d " i)))))
        (let ((buffer (amacs-events connection)))
          (unwind-protect
              (with-current-buffer buffer
                (goto-char (point-min))
                (should (looking-at-p (format ";; The wire log of .*'s server and this Emacs, since this Emacs connected \
(not an earlier Emacs's):\n;; its newest %d messages (amacs-events-log-size)"
                                              amacs-events-log-size)))
                (should (search-forward "-> call submit (\"turn 0\")" nil t)))
            (kill-buffer buffer)))))))

;; A newcomer's wire log read hello #3, hello #5, submit #6 and they wondered what #1, #2
;; and #4 hid: each connection's name had taken a number from the calls' counter.
(ert-deftest amacs-transport-test-a-connection-takes-no-call-number ()
  "Opening a connection leaves the calls' counter alone: the log's call numbers follow each other."
  (amacs--require-epc)
  (let* ((server (make-network-process :name "amacs-test-listener" :server t :host "127.0.0.1"
                                       :service t :noquery t))
         (port (process-contact server :service))
         (before epc:uid)
         (first (amacs--epc-connect "127.0.0.1" port))
         (second (amacs--epc-connect "127.0.0.1" port)))
    (unwind-protect
        (progn
          (should (= epc:uid before))
          (should-not (equal (epc:connection-name first) (epc:connection-name second))))
      (dolist (c (list first second))
        (delete-process (epc:connection-process c))
        (kill-buffer (epc:connection-buffer c)))
      (delete-process server))))

;; The rule that merges a stream's deltas, and drops those a streamed reply replaces, is the
;; server's (transport/server.py, Outbox; tests/test_transport.py): Emacs handles what comes.
(ert-deftest amacs-transport-test-each-event-is-handled-as-it-came ()
  "Deltas, annotations and replies are handled one by one, in order: no rule of the server's is kept twice."
  (amacs-transport-test--with-connection conn
    (let ((seen nil))
      (amacs-on-event "reply-delta" (lambda (e) (push (list 'delta (plist-get e :text)) seen)))
      (amacs-on-event "annotation" (lambda (e) (push (list 'note (plist-get e :text)) seen)))
      (amacs-on-event "reply" (lambda (e) (push (list 'reply (plist-get e :text)) seen)))
      (amacs--connection-filter
       connection conn nil
       (amacs-transport-test--frame
        '(amacs-events 0 ((:type "reply-delta" :text "a") (:type "reply-delta" :text "b")
                          (:type "annotation" :text "n") (:type "reply-delta" :text "c")
                          (:type "reply" :text "abc" :streamed t)))))
      (amacs--drain-events connection)
      (should (equal (nreverse seen) '((delta "a") (delta "b") (note "n") (delta "c") (reply "abc"))))
      (should-not (amacs-wire-queue-tail (amacs-connection-wire connection))))))

(ert-deftest amacs-transport-test-events-queued-while-draining ()
  "An event that arrives while a handler runs is handled after it, in the same drain."
  (amacs-transport-test--with-connection conn
    (let ((seen nil))
      (amacs-on-event "t" (lambda (e)
                            (push (plist-get e :n) seen)
                            (when (= (plist-get e :n) 1)
                              (amacs--connection-filter
                               connection conn nil (amacs-transport-test--frame '(amacs-events 0 ((:type "t" :n 3))))))))
      (amacs--connection-filter connection conn nil (amacs-transport-test--frame
                                          '(amacs-events 0 ((:type "t" :n 1) (:type "t" :n 2)))))
      (amacs--drain-events connection)
      (should (equal (nreverse seen) '(1 2 3))))))

(ert-deftest amacs-transport-test-a-setting-a-timer-set-goes-to-every-home-as-the-timers ()
  "Where a change to a setting came from was one variable for the whole Emacs, cleared when
the first home's server was told: the second home's server heard the timer's change as the
person's.  Each connection's wire keeps it until its server is told."
  (let* ((amacs--connections nil)
         (a (amacs-connection-for (make-temp-file "amacs-a" t)))
         (b (amacs-connection-for (make-temp-file "amacs-b" t)))
         (amacs-max-steps amacs-max-steps)
         (told nil))
    (dolist (connection (list a b))
      (setf (amacs-wire-settings-sent (amacs-connection-wire connection)) (amacs--settings)))
    (run-at-time 0 nil (lambda () (setq amacs-max-steps (1+ amacs-max-steps))))
    (let ((deadline (+ (float-time) 5)))
      (while (and (equal (amacs--settings) (amacs-wire-settings-sent (amacs-connection-wire a)))
                  (< (float-time) deadline))
        (accept-process-output nil 0.01)))
    (cl-letf (((symbol-function 'amacs--call-sync)
               (lambda (method _args) (push (list method (amacs--call-origin)) told) t)))
      (dolist (connection (list a b))
        (amacs-with-connection connection (should-not (amacs--send-changed-settings)))))
    (should (equal (mapcar (lambda (call) (plist-get (cadr call) :via)) told)
                   '("timer-event-handler" "timer-event-handler")))))

(provide 'amacs-transport-test)
;;;; Issue 12: a server that cannot start is explained once and not restarted for ever

(ert-deftest amacs-transport-test-failed-starts-back-off-then-stop ()
  "A server that always fails is started `amacs-start-attempts' times, its reason said once.
Then what waited is dropped and `amacs-start-failed-hook' runs; a new
round begins only when asked."
  (let* ((count-file (make-temp-file "amacs-starts"))
         (amacs-server-command
          (list "sh" "-c" (format "echo x >> %s; echo 'AMACS server error: the home is broken'; exit 1"
                                  (shell-quote-argument count-file))))
         (amacs-start-attempts 3) (amacs--retry-base 0.05)
         (amacs-disconnect-hook nil) (gave-up 0) (said nil) (ran nil)
         (amacs-start-failed-hook (list (lambda () (setq gave-up (1+ gave-up)))))
         (amacs-transport-message-function (lambda (text) (push text said)))
         (starts (lambda () (with-temp-buffer (insert-file-contents count-file)
                                              (count-lines (point-min) (point-max))))))
   (amacs-test-with-connection conn ()
    (unwind-protect
        (progn
          (amacs-when-ready (lambda () (setq ran t)))
          (let ((deadline (+ (float-time) 10)))
            (while (and (= gave-up 0) (< (float-time) deadline))
              (accept-process-output nil 0.02)))
          (should (= gave-up 1))
          (should (= (funcall starts) 3))
          (should-not ran)
          (should-not (amacs-life-on-ready (amacs-connection-life conn)))
          (setq said (nreverse said))
          (should (equal (seq-filter (lambda (s) (string-match-p "did not start:" s)) said)
                         '("The AMACS server did not start: the home is broken")))
          (should (string-prefix-p "Stopped trying: the AMACS server did not start in 3 attempts" (car (last said))))
          (accept-process-output nil 0.3)
          (should (= (funcall starts) 3))  ; nothing starts it by itself
          ;; Asking again is a new round, and says why again.
          (setq said nil)
          (amacs-when-ready #'ignore)
          (let ((deadline (+ (float-time) 10)))
            (while (and (= gave-up 1) (< (float-time) deadline))
              (accept-process-output nil 0.02)))
          (should (= (funcall starts) 6))
          (should (member "The AMACS server did not start: the home is broken" said)))
      (amacs--cancel-retry conn)
      (delete-file count-file)
      (delete-directory amacs-home t)))))

(defun amacs-transport-test--ask-and-wait (conn)
  "Ask for CONN's server; wait (at most 10 s) until nothing waits for one."
  (amacs-when-ready #'ignore)
  (let ((deadline (+ (float-time) 10)))
    (while (and (amacs-life-on-ready (amacs-connection-life conn)) (< (float-time) deadline))
      (accept-process-output nil 0.02))))

(ert-deftest amacs-transport-test-a-silent-crash-says-its-stderr ()
  "A server that dies before its log opens is explained by the last line it wrote to stderr."
  (let* ((amacs-server-command (list "sh" "-c" "echo 'PermissionError: no' >&2; exit 1"))
         (amacs-start-attempts 1) (amacs--retry-base 0.05)
         (amacs-disconnect-hook nil) (amacs-start-failed-hook nil) (said nil)
         (amacs-transport-message-function (lambda (text) (push text said))))
   (amacs-test-with-connection conn ()
    (unwind-protect
        (progn
          (amacs-transport-test--ask-and-wait conn)
          (should (seq-find (lambda (s) (string-match-p
                                         "did not start: exited abnormally with code 1: PermissionError: no" s))
                            said)))
      (delete-directory amacs-home t)))))

;;;; Remote errors (issue 14): a condition, not a printed string

(defun amacs-transport-test--call-failing (answer)
  "Call a method with `amacs--call-sync'; the server answers with ANSWER.
ANSWER is (return-error MESSAGE) or (epc-error MESSAGE), handed to
epc.el's own handlers, as a reply from the server would be."
  (amacs-test-with-connection _conn (:manager (make-epc:manager :connection (make-epc:connection :name "t")))
    (cl-letf (((symbol-function 'amacs-live-p) (lambda (&rest _) t))
              ((symbol-function 'epc:manager-send)
               (lambda (mngr _call uid &rest _)
                 (funcall (if (eq (car answer) 'epc-error)
                              #'epc:handler-epc-error
                            #'epc:handler-return-error)
                          mngr uid (cadr answer)))))
      (amacs--call-sync 'set_consciousness '("mood" 3)))))

(ert-deftest amacs-transport-test-remote-error-is-signalled-with-the-message ()
  "A method's error is signalled as `amacs-remote-error', data the server's message.
It is an `error' too, so callers that catch `error' still do, and the
agent's eval result is the message alone."
  (let ((message "mood must be a string, not 3 (\"quoted\")\nsecond line"))
    (let ((err (should-error (amacs-transport-test--call-failing (list 'return-error message))
                             :type 'amacs-remote-error)))
      (should (equal err (list 'amacs-remote-error message)))
      (should (equal (amacs-error-message err) message))
      (should (equal (error-message-string err) (format "AMACS server error: %S" message))))
    (should (equal (condition-case err
                       (amacs-transport-test--call-failing (list 'return-error message))
                     (error (list (car err) (amacs-error-message err))))
                   (list 'amacs-remote-error message)))
    (should (equal (cadr (should-error (amacs-transport-test--call-failing
                                        '(epc-error "EPC-ERROR: No such method : nope"))
                                       :type 'amacs-remote-error))
                   "EPC-ERROR: No such method : nope"))
    (let ((internal "internal error in ping: TypeError('ping() missing 1 argument') (see logs/server.log)"))
      (should (equal (amacs-error-message
                      (should-error (amacs-transport-test--call-failing (list 'return-error internal))))
                     internal)))))

(ert-deftest amacs-transport-test-eval-result-of-a-remote-error-is-the-message ()
  "An eval whose agent call the server refuses reports the server's message alone."
  (cl-letf (((symbol-function 'amacs-transport-test--refused)
             (lambda () (signal 'amacs-remote-error (list "mood must be a string")))))
    (let ((result (amacs--eval-form "(amacs-transport-test--refused)")))
      (should-not (plist-get result :success))
      (should (equal (plist-get result :error) "mood must be a string")))))

;; A message's length is six hex digits: a call too big for them is
;; refused before anything is sent, and one under them goes as it was.
(ert-deftest amacs-transport-test-a-call-too-big-for-the-link-is-refused ()
  (let ((small (list "a" (propertize "b" 'face 'bold) 3)))
    (should (equal-including-properties (amacs--outgoing 'agent_tool small) (list "a" "b" 3))))
  (let ((err (should-error (amacs--outgoing 'agent_tool
                                            (list (make-string (1+ amacs-max-call-bytes) ?x))))))
    (should (string-match-p
             "The call to agent_tool carries 7.0 MiB, more than a message"
             (error-message-string err)))))

;; ./amacs asks the warm server for the home's server while Emacs starts, and gives Emacs
;; the folder to find it by and the token it was started with.
(ert-deftest amacs-transport-test-the-first-start-alone-takes-the-early-server ()
  "The first start takes ./amacs's early server and its token; nothing else sees them."
  (let ((process-environment (append (list "AMACS_EARLY=/tmp/early" (concat "AMACS_EARLY_TOKEN=" (make-string 64 ?e)))
                                     process-environment)))
    (should (equal (amacs--take-early-start) (cons "/tmp/early" (make-string 64 ?e))))
    (should-not (getenv "AMACS_EARLY"))
    (should-not (getenv "AMACS_EARLY_TOKEN"))
    (should-not (amacs--take-early-start))))

;;;; A server the warm server forked for Emacs itself

(defun amacs-transport-test--warm-frame (kind text)
  "The warm server's message KIND (a byte) with TEXT, as amacs_server/warm.py frames it."
  (let ((size (length text)))
    (concat (unibyte-string kind (logand (ash size -24) 255) (logand (ash size -16) 255)
                            (logand (ash size -8) 255) (logand size 255))
            text)))

(ert-deftest amacs-transport-test-the-warm-servers-messages-in-any-split ()
  "Its messages are read whole however the socket splits them, a part kept for the rest."
  (let* ((frames (list (cons ?p "4242") (cons ?o "40123\n") (cons ?e (make-string 300 ?x)) (cons ?s "256")))
         (data (apply #'concat (mapcar (lambda (f) (amacs-transport-test--warm-frame (car f) (cdr f))) frames))))
    (dotimes (at (1+ (length data)))
      (pcase-let* ((`(,first . ,rest) (amacs--read-frames (substring data 0 at)))
                   (`(,second . ,left) (amacs--read-frames (concat rest (substring data at)))))
        (should (equal (append first second) frames))
        (should (equal left ""))))))

(ert-deftest amacs-transport-test-a-fork-of-the-warm-server-ends-as-a-process-does ()
  "What the fork wrote to stderr and its end (its wait status) are said as a server process's.
Emacs asked the warm server itself (no process of its own): a fake one
here, which forks nothing, writes to stderr and exits 1."
  (let* ((socket (make-temp-name (expand-file-name "amacs-warm-test-" temporary-file-directory)))
         (fake (make-network-process
                :name "amacs-test-warm" :server t :family 'local :service socket :noquery t
                :coding 'binary :filter #'ignore
                :log (lambda (_server client _message)
                       (process-send-string
                        client (concat (amacs-transport-test--warm-frame ?p "4242")
                                       (amacs-transport-test--warm-frame ?e "PermissionError: no\n")
                                       (amacs-transport-test--warm-frame ?s (number-to-string (ash 1 8)))))
                       (delete-process client))))
         (amacs-start-attempts 1) (amacs--retry-base 0.05)
         (amacs-disconnect-hook nil) (amacs-start-failed-hook nil) (said nil)
         (amacs-transport-message-function (lambda (text) (push text said))))
    (cl-letf (((symbol-function 'amacs--server-launch-command) (lambda () (list "false" "warm_launch.py")))
              ((symbol-function 'amacs--warm-socket) (lambda (_python) socket)))
      (amacs-test-with-connection conn ()
        (unwind-protect
            (progn
              ;; The launcher's command here, "false", would say no PermissionError.
              (amacs-transport-test--ask-and-wait conn)
              (should (seq-find (lambda (s) (string-match-p
                                             "did not start: exited abnormally with code 1: PermissionError: no" s))
                                said)))
          (delete-process fake)
          (delete-file socket)
          (delete-directory amacs-home t))))))

(ert-deftest amacs-transport-test-a-fork-of-the-warm-server-is-named-by-its-wait-status ()
  "Killed, exited, or no status at all (the warm server went too: 1, as the launcher said)."
  (let* ((socket (make-temp-name (expand-file-name "amacs-warm-test-" temporary-file-directory)))
         (proc (make-network-process :name "amacs-test-warm" :server t :family 'local :service socket
                                     :noquery t)))
    (unwind-protect
        (progn
          (process-put proc 'amacs-wait-status 9)
          (should (equal (amacs--end-words proc) "killed"))
          (process-put proc 'amacs-wait-status (ash 3 8))
          (should (equal (amacs--end-words proc) "exited abnormally with code 3"))
          (process-put proc 'amacs-wait-status 0)
          (should (equal (amacs--end-words proc) "finished"))
          (process-put proc 'amacs-wait-status nil)
          (should (equal (amacs--end-words proc) "exited abnormally with code 1")))
      (delete-process proc)
      (delete-file socket))))

;;;; The server asked for before the client loaded (amacs-warm.el)

(defun amacs-transport-test--fake-warm (socket note)
  "A fake warm server on SOCKET: for each request read whole, a fork's pid.
It calls NOTE with (asked N REQUEST) for the Nth request and (ended N)
when that Emacs closed its end for writing (the fork stops then); it
forks nothing."
  (let ((count 0))
    (make-network-process
     :name "amacs-test-warm" :server t :family 'local :service socket :noquery t :coding 'binary
     :filter (lambda (client data)
               (let ((got (concat (process-get client 'got) data)))
                 (process-put client 'got got)
                 (when (and (>= (length got) 4) (not (process-get client 'number))
                            (>= (length got) (+ 4 (logior (ash (aref got 0) 24) (ash (aref got 1) 16)
                                                          (ash (aref got 2) 8) (aref got 3)))))
                   (process-put client 'number (setq count (1+ count)))
                   (funcall note (list 'asked count (substring got 4)))
                   (process-send-string client (amacs-transport-test--warm-frame
                                                ?p (number-to-string (+ 4000 count)))))))
     :sentinel (lambda (client _event)
                 (unless (process-live-p client)
                   (funcall note (list 'ended (process-get client 'number))))))))

(defmacro amacs-transport-test--asking-first (events &rest body)
  "Run BODY in a fresh connection with a fake warm server, whose EVENTS are a list.
As an interactive Emacs whose ./amacs would ask first: a key in the
environment, no early start, the warm server's launcher the command."
  (declare (indent 1))
  `(let* ((socket (make-temp-name (expand-file-name "amacs-warm-test-" temporary-file-directory)))
          (,events nil)
          (fake (amacs-transport-test--fake-warm socket (lambda (event) (push event ,events))))
          (amacs--asked-first nil)
          (amacs-disconnect-hook nil) (amacs-start-failed-hook nil)
          (amacs-transport-message-function #'ignore)
          (process-environment (append (list "ANTHROPIC_API_KEY=sk-ant-test" "AMACS_EARLY" "AMACS_WARM")
                                       process-environment)))
     (cl-letf (((symbol-function 'amacs--server-launch-command) (lambda () (list "false" "warm_launch.py")))
               ((symbol-function 'amacs--warm-socket) (lambda (_python) socket))
               ((symbol-function 'file-executable-p) (lambda (_file) t)))
       (amacs-test-with-connection conn ()
         (unwind-protect
             (progn ,@body)
           (let ((proc (amacs-server-process conn)))
             (when (processp proc)
               (set-process-sentinel proc #'ignore)
               (delete-process proc)))
           (delete-process fake)
           (delete-file socket)
           (delete-directory amacs-home t))))))

(defun amacs-transport-test--wait-for (predicate)
  "Wait (at most 10 s) until PREDICATE returns non-nil; return that."
  (let ((deadline (+ (float-time) 10)) (value nil))
    (while (and (not (setq value (funcall predicate))) (< (float-time) deadline))
      (accept-process-output nil 0.02))
    value))

(ert-deftest amacs-transport-test-the-server-asked-for-first-is-the-one-the-start-takes ()
  "./amacs asks the warm server before the client loads; the shell's start takes that server.
One request, carrying the token Emacs then expects at hello, and what the
warm server answers on it is read as that server's (its pid)."
  (amacs-transport-test--asking-first events
    (should (let ((noninteractive nil)) (amacs-ask-warm-first)))
    (should (amacs-transport-test--wait-for (lambda () events)))
    (let ((first amacs--asked-first))
      (amacs-start-server)
      (should (eq (amacs-server-process) (plist-get first :process)))
      (should (equal (amacs-life-token (amacs-connection-life (amacs-current-connection)))
                     (plist-get first :token)))
      (should (amacs-transport-test--wait-for (lambda () (process-get (amacs-server-process) 'amacs-pid))))
      (should (equal (process-get (amacs-server-process) 'amacs-pid) 4001))
      (should-not amacs--asked-first)
      (pcase-let ((`((asked 1 ,request)) events))
        (should (string-search (concat "\"AMACS_TOKEN\":\"" (plist-get first :token) "\"") request))
        (should (string-search (concat "\"AMACS_HOME\":\"" (directory-file-name amacs-home) "\"") request))))))

(ert-deftest amacs-transport-test-a-server-asked-for-first-otherwise-is-stopped-before-another ()
  "Asked for with another environment than the start's: not taken.
Its end is closed and waited for (it holds the home's lock) before the
start asks for its own server, with a token of its own."
  (amacs-transport-test--asking-first events
    (should (let ((noninteractive nil)) (amacs-ask-warm-first)))
    (let ((first amacs--asked-first)
          (process-environment (cons "AMACS_MODEL=claude-other" process-environment)))
      (amacs-start-server)
      (should (amacs-transport-test--wait-for (lambda () (= (length events) 3))))
      (should (equal (mapcar (lambda (e) (list (car e) (cadr e))) (reverse events))
                     '((asked 1) (ended 1) (asked 2))))
      (should-not (process-live-p (plist-get first :process)))
      (should-not (equal (amacs-life-token (amacs-connection-life (amacs-current-connection)))
                         (plist-get first :token)))
      (should (amacs-transport-test--wait-for (lambda () (process-get (amacs-server-process) 'amacs-pid))))
      (should (equal (process-get (amacs-server-process) 'amacs-pid) 4002)))))

;;; amacs-transport-test.el ends here
