;;; amacs-test.el --- ERT tests for AMACS's elisp -*- lexical-binding: t -*-

;;; Commentary:

;; Unit tests that need no server.  The end-to-end tests (batch Emacs
;; against the real server) are driven from tests/e2e/ by pytest.

;;; Code:

(require 'ert)
(require 'amacs)
(require 'amacs-test-helpers)
(require 'amacs-hub)               ; autoloaded in use; loaded here for its tests

;;;; Eval (RFC v4 §7, EPIC-002 IMP-018)

(ert-deftest amacs-test-eval-returns-printed-value ()
  "RFC §7: a successful eval returns its printed value: (+ 2 2) gives \"4\"."
  (should (equal (amacs--eval-form "(+ 2 2)") '(:success t :result "4"))))

(ert-deftest amacs-test-eval-error-is-data ()
  "RFC §7: an eval that signals comes back as an error message, not a crash."
  (let ((result (amacs--eval-form "(car 1)")))
    (should (eq (plist-get result :success) nil))
    (should (equal (plist-get result :error) "Wrong type argument: listp, 1"))))

(ert-deftest amacs-test-eval-unreadable ()
  "IMP-018: unreadable elisp is reported as such."
  (let ((result (amacs--eval-form "(+ 2")))
    (should-not (plist-get result :success))
    (should (string-prefix-p "Unreadable elisp" (plist-get result :error))))
  (should (string-prefix-p "Unreadable elisp"
                           (plist-get (amacs--eval-form "  ; only a comment") :error))))

(ert-deftest amacs-test-eval-several-forms-run-in-order ()
  "IMP-018: several top-level forms run as one `progn'; the last value returns."
  (should (equal (plist-get (amacs--eval-form "(setq amacs-test--x 1) (setq amacs-test--x (+ amacs-test--x 41)) ; done")
                            :result)
                 "42")))

(defvar amacs-test--x nil "Scratch variable for eval tests.")

(ert-deftest amacs-test-eval-strips-text-properties ()
  "DESIGN defect 7: results carry no text properties into the printed value."
  (should (equal (plist-get (amacs--eval-form "(propertize \"hi\" 'face 'bold)") :result)
                 "\"hi\"")))

(ert-deftest amacs-test-eval-result-capped ()
  "A huge result is cut to `amacs-eval-result-max-chars' with a note."
  (let* ((amacs-eval-result-max-chars 50)
         (result (plist-get (amacs--eval-form "(make-string 500 ?x)") :result)))
    (should (string-match-p "\\[cut: 50 of 502 chars shown\\]\\'" result))))

(defun amacs-test--signal-self-later (seconds)
  "Have a child process send this Emacs SIGUSR1 after SECONDS."
  (start-process "amacs-test-kill" nil "sh" "-c"
                 (format "sleep %s; kill -USR1 %d" seconds (emacs-pid))))

(ert-deftest amacs-test-eval-loop-stopped-by-sigusr1 ()
  "IMP-018 time limit: a pure-elisp loop is stopped by the server's SIGUSR1."
  (amacs-test--signal-self-later 0.3)
  (let ((result (amacs--eval-form "(let ((i 0)) (while t (setq i (1+ i))))")))
    (should-not (plist-get result :success))
    (should (string-match-p "stopped" (plist-get result :error))))
  ;; Emacs goes on, and the debugger is not armed afterwards.
  (should-not debug-on-next-call)
  (should (equal (plist-get (amacs--eval-form "(* 6 7)") :result) "42")))

(ert-deftest amacs-test-eval-sleep-stopped-by-sigusr1 ()
  "IMP-018 time limit: an eval waiting in `sleep-for' is stopped too."
  (amacs-test--signal-self-later 0.3)
  (let ((start (float-time))
        (result (amacs--eval-form "(sleep-for 30)")))
    (should-not (plist-get result :success))
    (should (< (- (float-time) start) 10))))

(ert-deftest amacs-test-stray-sigusr1-is-harmless ()
  "A SIGUSR1 that arrives after the eval ended does nothing."
  (amacs-test--signal-self-later 0.1)
  ;; Waited for, not slept: a signal sent late (a loaded machine) would stop the eval below
  ;; or the next test's.  Handled outside an eval, it is queued as an event: input pending.
  (let ((deadline (+ (float-time) 10)))
    (while (and (not (input-pending-p)) (< (float-time) deadline))
      (sleep-for 0.02)))
  (should (input-pending-p))
  (should (equal (plist-get (amacs--eval-form "(+ 1 1)") :result) "2")))

;;;; Transport helpers

(ert-deftest amacs-test-clean-strips-properties-deeply ()
  "DESIGN defect 7: strings sent to the server lose their text properties."
  (let ((cleaned (amacs--clean (list (propertize "a" 'face 'bold) :k (cons (propertize "b" 'x 1) 2)))))
    (should (equal cleaned '("a" :k ("b" . 2))))
    (should-not (text-properties-at 0 (car cleaned)))))

(ert-deftest amacs-test-token-is-random-hex ()
  "The token Emacs gives its server is 64 hex digits and fresh each time."
  (let ((a (amacs--make-token)) (b (amacs--make-token)))
    (should (string-match-p "\\`[0-9a-f]\\{64\\}\\'" a))
    (should-not (equal a b))))

(ert-deftest amacs-test-events-handled-in-order ()
  "Server events are handled in arrival order, outside the process filter."
  (amacs-test-with-connection conn ()
    (let ((amacs--event-handlers nil)
          (seen nil))
      (amacs-on-event "t" (lambda (e) (push (plist-get e :n) seen)))
      (dotimes (n 5) (amacs--queue-events conn (list (list :type "t" :n n))))
      (should-not seen)                   ; nothing ran inside the "filter"
      (cancel-timer (amacs-wire-drain-timer (amacs-connection-wire conn)))
      (amacs--drain-events conn)
      (should (equal (nreverse seen) '(0 1 2 3 4))))))

(ert-deftest amacs-test-remote-error-message-unquoted ()
  "Server error messages reach the person without Lisp quoting."
  (should (equal (amacs--remote-error-message "\"mood must be a string\"")
                 "mood must be a string"))
  ;; An error form, as epc hands some remote errors over (seen in the hub).
  (should (equal (amacs--remote-error-message '(error "\"task-1 is done\""))
                 "task-1 is done"))
  ;; A refused hello: deferred hands the epc-error over printed (issue 12).
  (should (equal (amacs--remote-error-message
                  '(error "(epc-error \"another Emacs (pid 7) is connected\")"))
                 "another Emacs (pid 7) is connected"))
  ;; Issue 14: the printed message is read back, not matched by a regex: quotes,
  ;; backslashes and line breaks in it come through as the server wrote them.
  (let ((text "mood must be a string, got \"3\" (C:\\x)\nsee logs/server.log"))
    (should (equal (amacs--remote-error-message (format "%S" text)) text))
    (should (equal (amacs--remote-error-message (list 'error (format "%S" text))) text)))
  ;; A message that only looks printed stays as it is.
  (should (equal (amacs--remote-error-message "(foo) is not a list") "(foo) is not a list")))

(ert-deftest amacs-test-stop-server-ends-the-turn-once ()
  "Issue 12: stopping the server ends the shell's turn at once, once.
The disconnect hook runs before the server has exited; its sentinel, run
later, neither runs it again nor says the server stopped."
  (let ((proc (start-process "amacs-test-stop" nil "sleep" "0.3")))
    (amacs-test-with-connection conn (:process proc)
      (let* ((amacs-stop-grace 5)
             (said nil)
             (amacs-transport-message-function (lambda (text) (push text said)))
             (hooked 0)
             (amacs-disconnect-hook (list (lambda () (setq hooked (1+ hooked))
                                            (should (process-live-p proc))))))
        (process-put proc 'amacs-connection conn)
        (set-process-sentinel proc #'amacs--server-sentinel)
        (amacs-stop-server)
        (while (process-live-p proc) (accept-process-output proc 0.05))
        (accept-process-output nil 0.05)
        (should (= hooked 1))
        (should-not said)
        (should-not (amacs-life-process (amacs-connection-life conn)))))))

(ert-deftest amacs-test-hello-settings ()
  "The server learns the eval time limit and step limit from the defcustoms."
  (let ((amacs-eval-timeout 7) (amacs-max-steps 3)
        (amacs-price-table '(("my-model" 1 2 3 4))))
    (should (equal (amacs--settings)
                   '(:eval-timeout 7 :max-steps 3
                     :prices ((:model "my-model" :input 1 :output 2 :cache-write 3 :cache-read 4))
                     :read-before-write "off")))))

;;;; API key (issue 2: environment, defcustom, auth-source)

(ert-deftest amacs-test-api-key-from-auth-source ()
  "Without the variable or the defcustom, the key comes from auth-source."
  (let* ((netrc (make-temp-file "amacs-authinfo"))
         (auth-sources (list netrc))
         (amacs-api-key nil)
         (process-environment (cons "ANTHROPIC_API_KEY" process-environment)))
    (unwind-protect
        (progn
          (with-temp-file netrc
            (insert "machine api.anthropic.com login apikey password sk-from-netrc\n"))
          (auth-source-forget-all-cached)
          (should (equal (amacs--api-key) "sk-from-netrc"))
          (should (member "ANTHROPIC_API_KEY=sk-from-netrc" (amacs--server-environment "tok")))
          (let ((amacs-api-key "sk-custom"))
            (should (equal (amacs--api-key) "sk-custom")))
          (let ((process-environment (cons "ANTHROPIC_API_KEY=sk-env" process-environment)))
            ;; The server inherits the variable; Emacs adds nothing.
            (should-not (amacs--api-key))))
      (delete-file netrc)
      (auth-source-forget-all-cached))))

(ert-deftest amacs-test-server-environment-carries-token ()
  "The token reaches the server through its environment only."
  (should (member "AMACS_TOKEN=secret" (amacs--server-environment "secret"))))

;;;; Shell (RFC §2.1, §9.1)

(ert-deftest amacs-test-shell-mode-prompt-and-sender ()
  "The shell is comint with a dummy process, prompt `amacs> ' and our sender."
  (let ((amacs-home (make-temp-file "amacs-home" t)))  ; the shell keeps its unsent input there
    (with-temp-buffer
      (amacs-shell-mode)
      (should (derived-mode-p 'comint-mode))
      (should (process-live-p (get-buffer-process (current-buffer))))
      (should (eq comint-input-sender #'amacs-shell--input-sender))
      (should (string-suffix-p "amacs> " (buffer-string)))
      (delete-process (get-buffer-process (current-buffer))))
    (delete-directory amacs-home t)))

(ert-deftest amacs-test-shell-note-goes-above-idle-prompt ()
  "A note while idle appears above the prompt and keeps half-typed input."
  (let ((buf (get-buffer-create amacs-shell-buffer-name))
        (amacs-home (make-temp-file "amacs-home" t)) ; the half-typed input is kept there
        (amacs-shell-busy nil))
    (unwind-protect
        (with-current-buffer buf
          (amacs-shell-mode)
          (goto-char (point-max))
          (insert "half typ")
          (amacs-shell--note "No API key: set it")
          (should (equal (buffer-substring-no-properties (point-min) (point-max))
                         ";; No API key: set it\namacs> half typ"))
          (should (equal (comint-get-old-input-default) "half typ")))
      (let ((kill-buffer-query-functions nil)) (kill-buffer buf))
      (delete-directory amacs-home t))))

(ert-deftest amacs-test-the-hub-labels-an-abandoned-future-by-its-inputs ()
  "A future that held `note' and `eval' was labelled `ticks 3-6: note' in the hub:
its line names its first input and its last, and how many when more."
  (should (equal (amacs-hub--future-inputs '(:first-input "note" :last-input "note" :inputs 1)) "note"))
  (should (equal (amacs-hub--future-inputs '(:first-input "note" :last-input "eval" :inputs 2)) "note, eval"))
  (should (equal (amacs-hub--future-inputs '(:first-input "note" :last-input "eval" :inputs 5))
                 "note … eval (5 inputs)"))
  (should (equal (amacs-hub--future-inputs '(:first-input nil :last-input nil :inputs 0)) "(no input)"))
  (should (<= (string-width (amacs-hub--future-inputs
                             (list :first-input (make-string 80 ?a) :last-input (make-string 80 ?b) :inputs 9)))
              60)))

(ert-deftest amacs-test-chat-log-opens-folded-at-the-newest-tick ()
  "Issue 4: agent-chat.org opens in org-mode, ticks folded, the newest open."
  (let* ((home (make-temp-file "amacs-home" t))
         (amacs-home home)
         (amacs-hub--state nil))
    (unwind-protect
        (progn
          (with-temp-file (expand-file-name "agent-chat.org" home)
            (dotimes (i 3)
              (insert (format "* Tick %d\n:PROPERTIES:\n:TIMESTAMP: 2026-01-01T00:00:0%dZ\n:END:\n\n** Human\nquestion %d\n\n** Agent\nanswer %d\n\n"
                              (1+ i) i (1+ i) (1+ i)))))
          (amacs-open-chat-log)
          (should (derived-mode-p 'org-mode))
          ;; A newcomer typed into it, taking it for the shell: the agent's file opens read-only.
          (should buffer-read-only)
          (should-error (insert "loop") :type 'buffer-read-only)
          (goto-char (point-min))
          (search-forward "question 1")
          (should (org-invisible-p))          ; old bodies are folded
          (goto-char (point-min))
          (search-forward "** Human")
          (beginning-of-line)
          (should-not (org-invisible-p))      ; their headings show
          (goto-char (point-min))
          (search-forward "answer 3")
          (should-not (org-invisible-p))      ; the newest tick is open
          (kill-buffer))
      (delete-directory home t))))

(ert-deftest amacs-test-shell-links-to-hub-and-chat-log ()
  "The shell links to the hub and the chat log."
  (should (eq (lookup-key amacs-shell-mode-map (kbd "C-c C-v")) #'amacs-hub))
  ;; C-c C-h is the help for the C-c prefix (Key Binding Conventions): never ours.
  (should-not (lookup-key amacs-shell-mode-map (kbd "C-c C-h")))
  (should (eq (lookup-key amacs-shell-mode-map (kbd "C-c C-l")) #'amacs-open-chat-log)))

(defmacro amacs-test--with-shell (home sent &rest body)
  "Run BODY in a fresh shell whose AMACS home is HOME; SENT collects what is sent."
  (declare (indent 2))
  `(let ((amacs-home ,home)
         (buf (get-buffer-create amacs-shell-buffer-name)))
     (unwind-protect
         (with-current-buffer buf
           (amacs-shell-mode)
           (setq-local comint-input-sender
                       (lambda (_proc input) (amacs-shell--save-history) (push input ,sent)))
           ,@body)
       (let ((kill-buffer-query-functions nil)) (kill-buffer buf)))))

(ert-deftest amacs-test-shift-return-inserts-a-newline ()
  "RFC v4 §12 q2: S-RET inserts a newline, RET sends."
  (should (eq (lookup-key amacs-shell-mode-map (kbd "S-<return>")) #'amacs-shell-newline))
  (should (eq (lookup-key amacs-shell-mode-map (kbd "RET")) #'amacs-shell-return))
  (should (eq (lookup-key amacs-shell-mode-map (kbd "C-j")) #'comint-send-input)) ; type-ahead at start
  (let ((home (make-temp-file "amacs-home" t)) (sent nil))
    (amacs-test--with-shell home sent
      (goto-char (point-max))
      (insert "line one")
      (amacs-shell-newline)
      (insert "line two")
      (comint-send-input)
      (should (equal sent '("line one\nline two"))))
    (delete-directory home t)))

(ert-deftest amacs-test-history-persists-across-sessions ()
  "Issue 6: M-p recalls inputs from an earlier session."
  (let ((home (make-temp-file "amacs-home" t)) (sent nil))
    (amacs-test--with-shell home sent
      (dolist (text '("first question" "second question"))
        (goto-char (point-max)) (insert text) (comint-send-input)))
    (should (file-exists-p (expand-file-name "shell-history" home)))
    (amacs-test--with-shell home sent
      (goto-char (point-max))
      (comint-previous-input 1)
      (should (equal (buffer-substring-no-properties (comint-line-beginning-position) (point-max))
                     "second question"))
      (comint-previous-input 1)
      (should (equal (buffer-substring-no-properties (comint-line-beginning-position) (point-max))
                     "first question")))
    (delete-directory home t)))

(defun amacs-test--file-text (file)
  "FILE's text, or nil when there is no FILE."
  (and (file-exists-p file) (with-temp-buffer (insert-file-contents file) (buffer-string))))

(ert-deftest amacs-test-unsent-input-comes-back-and-sent-input-does-not ()
  "Input typed and not sent is saved when the shell goes and is back at the next one's prompt.
The shell says so once its last exchanges are shown; sent, it is gone
from the file, and the next shell's prompt is empty."
  (let* ((home (make-temp-file "amacs-home" t)) (sent nil)
         (file (expand-file-name "shell-draft" home)))
    (amacs-test--with-shell home sent
      (goto-char (point-max))
      (insert "half a thought\nand its second line"))    ; the buffer is killed: saved then
    (should (equal (amacs-test--file-text file) "half a thought\nand its second line"))
    (should (= (logand (file-modes file) #o077) 0))       ; private, as the history is
    (amacs-test--with-shell home sent
      (should (equal (amacs-shell--draft) ""))  ; back once the last exchanges are shown
      (amacs-shell--save-drafts)                ; meanwhile the file keeps it
      (should (equal (amacs-test--file-text file) "half a thought\nand its second line"))
      (amacs-shell--restore-draft)
      (amacs-shell--restore-draft)        ; once
      (should (= (how-many "Restored at the prompt: your input from last time, not answered yet"
                           (point-min) (point-max))
                 1))
      (should (equal (amacs-shell--draft) "half a thought\nand its second line"))
      (cl-letf (((symbol-function 'amacs-when-ready) #'ignore))
        (setq-local comint-input-sender #'amacs-shell--input-sender) ; the shell's own: it forgets the draft
        (goto-char (point-max))
        (comint-send-input))
      ;; Sent, it waits in the footer, kept until the agent takes it: taken, it is gone.
      (should (equal (amacs-test--file-text file) "half a thought\nand its second line"))
      (amacs-shell--on-input-taken nil)
      (should-not (file-exists-p file)))
    (amacs-test--with-shell home sent
      (amacs-shell--restore-draft)
      (should (equal (amacs-shell--draft) ""))
      (should-not (string-match-p "Restored" (buffer-string))))
    (delete-directory home t)))

(ert-deftest amacs-test-queued-input-not-taken-comes-back-with-the-prompt-s ()
  "An input queued in the footer and not taken yet is kept with the prompt's.
A server that stops (Emacs quit during a turn) takes its queue with
it: the next shell's prompt has both, queued first; taken, it is gone."
  (let* ((home (make-temp-file "amacs-home" t)) (sent nil)
         (file (expand-file-name "shell-draft" home)))
    (amacs-test--with-shell home sent
      (amacs-shell--queue (concat amacs-shell-prompt "queued one\nof two lines\n"))
      (amacs-shell--queue (concat amacs-shell-prompt "queued two\n"))
      (goto-char (point-max))
      (insert "typed")
      (amacs-shell--save-drafts)
      (should (equal (amacs-test--file-text file) "queued one\nof two lines\n\nqueued two\n\ntyped"))
      (amacs-shell--take-queued)
      (amacs-shell--save-drafts)
      (should (equal (amacs-test--file-text file) "queued two\n\ntyped"))
      (let ((inhibit-read-only t)) (delete-region (- (point-max) 5) (point-max))))
    (should (equal (amacs-test--file-text file) "queued two"))
    (amacs-test--with-shell home sent
      (amacs-shell--restore-draft)
      (should (equal (amacs-shell--draft) "queued two")))
    (delete-directory home t)))

(ert-deftest amacs-test-unsent-input-is-not-glued-to-what-is-typed-at-start ()
  "Typed while the shell starts, before the input of last time is back: neither is lost.
Killed then, the file keeps both; shown, the typed text stays at the
prompt and the input of last time goes to the kill ring."
  (let* ((home (make-temp-file "amacs-home" t)) (sent nil) (kill-ring nil)
         (file (expand-file-name "shell-draft" home)))
    (with-temp-file file (insert "from last time"))
    (amacs-test--with-shell home sent
      (goto-char (point-max))
      (insert "typed at start")
      (funcall (car (memq #'amacs-shell--save-drafts kill-emacs-hook))) ; killed now: both kept
      (should (equal (amacs-test--file-text file) "from last time\ntyped at start")))
    (with-temp-file file (insert "from last time"))
    (amacs-test--with-shell home sent
      (goto-char (point-max))
      (insert "typed at start")
      (amacs-shell--restore-draft)
      (should (equal (amacs-shell--draft) "typed at start"))
      (should (equal (car kill-ring) "from last time"))
      (should (string-match-p "Your input from last time, not sent, is in the kill ring (C-y)" (buffer-string))))
    (delete-directory home t)))

(ert-deftest amacs-test-unsent-input-is-saved-while-typing-and-at-exit ()
  "The timer saves the unsent input only when it changed; Emacs's exit saves it too."
  (let* ((home (make-temp-file "amacs-home" t)) (sent nil)
         (file (expand-file-name "shell-draft" home)))
    (amacs-test--with-shell home sent
      (should (timerp amacs-shell--draft-timer))
      (should (memq #'amacs-shell--save-drafts kill-emacs-hook))
      (goto-char (point-max))
      (insert "typed")
      (amacs-shell--save-drafts)          ; what the timer runs
      (should (equal (amacs-test--file-text file) "typed"))
      (delete-file file)
      (amacs-shell--save-drafts)          ; unchanged: not written again
      (should-not (file-exists-p file))
      (insert " more")
      (funcall (car (memq #'amacs-shell--save-drafts kill-emacs-hook))) ; C-x C-c runs it
      (should (equal (amacs-test--file-text file) "typed more"))
      (delete-region (+ amacs-shell--prompt-start (length amacs-shell-prompt)) (point-max))
      (amacs-shell--save-drafts)          ; emptied by hand: nothing comes back
      (should-not (file-exists-p file)))
    (delete-directory home t)))

(ert-deftest amacs-test-compose-sends-through-the-shell ()
  "Issue 6: a long prompt composed in its own buffer is sent as typed input."
  (let ((home (make-temp-file "amacs-home" t)) (sent nil))
    (amacs-test--with-shell home sent
      (amacs-compose)
      (insert "A long prompt\nover two lines")
      (amacs-compose-send)
      (should (equal sent '("A long prompt\nover two lines")))
      (should-not (get-buffer "*amacs-compose*")))
    (delete-directory home t)))

(ert-deftest amacs-test-agent-buffers-shown-only-when-asked ()
  "RFC v4 §12 q3: a buffer the eval visits is shown only if `amacs-display-agent-buffers' says so."
  (let ((file (make-temp-file "amacs-visit" nil ".txt" "hello")))
    (unwind-protect
        (progn
          (delete-other-windows)
          (let ((amacs-display-agent-buffers nil)
                (before (mapcar #'window-buffer (window-list))))
            (should (plist-get (amacs--eval-form
                                (format "(progn (switch-to-buffer (find-file-noselect %S)) t)" file))
                               :success))
            (should (equal before (mapcar #'window-buffer (window-list))))
            (should-not (get-buffer-window (get-file-buffer file))))
          (kill-buffer (get-file-buffer file))
          (let ((amacs-display-agent-buffers t)
                (home (selected-window)))
            (amacs--eval-form (format "(find-file-noselect %S)" file))
            (should (get-buffer-window (get-file-buffer file)))
            (should-not (eq (get-buffer-window (get-file-buffer file)) home))))
      (when (get-file-buffer file) (kill-buffer (get-file-buffer file)))
      (delete-other-windows)
      (delete-file file))))

(ert-deftest amacs-test-input-waiting-when-the-server-dies-restarts-it ()
  "Input queued between the connection dropping and the server's sentinel is not stranded."
  (let ((proc (start-process "amacs-test-dying" nil "true")))
    (amacs-test-with-connection conn (:process proc :on-ready (list #'ignore))
      (let ((amacs-transport-message-function #'ignore)
            (started 0))
        (process-put proc 'amacs-connection conn)
        (process-put proc 'amacs-accepted t)  ; a server that ran (a failed start waits: issue 12)
        (while (process-live-p proc) (accept-process-output proc 0.05))
        (cl-letf (((symbol-function 'amacs-start-server) (lambda (&rest _) (setq started (1+ started)))))
          (amacs--server-sentinel proc "killed\n"))
        (should (= started 1))
        (should-not (amacs-life-process (amacs-connection-life conn)))
        ;; With nothing waiting, a dead server is not restarted by itself.
        (let ((proc2 (start-process "amacs-test-dying" nil "true")))
          (process-put proc2 'amacs-connection conn)
          (setf (amacs-life-process (amacs-connection-life conn)) proc2 (amacs-life-on-ready (amacs-connection-life conn)) nil)
          (while (process-live-p proc2) (accept-process-output proc2 0.05))
          (cl-letf (((symbol-function 'amacs-start-server) (lambda (&rest _) (setq started (1+ started)))))
            (amacs--server-sentinel proc2 "killed\n"))
          (should (= started 1)))))))

;;;; Issue 9: cancelling queued input, headless server.json, restart line

(ert-deftest amacs-test-cancel-waiting-drops-queued-functions ()
  "Issue 9: `amacs-cancel-waiting' drops what waits for the server and counts it."
  (let* ((ran nil)
         (amacs-ready-hook nil))
    (amacs-test-with-connection conn (:on-ready (list (lambda () (push 'b ran)) (lambda () (push 'a ran))))
      (should (= (amacs-cancel-waiting) 2))
      (should-not (amacs-life-on-ready (amacs-connection-life conn)))
      (should (= (amacs-cancel-waiting) 0))
      (amacs--hello-accepted conn '(:model "m"))
      (should-not ran))))

(defun amacs-test--write-server-json (home alist)
  "Write ALIST as server.json in HOME."
  (with-temp-file (expand-file-name "server.json" home)
    (insert (json-encode alist))))

(ert-deftest amacs-test-headless-server-json-live-or-stale ()
  "Issue 9: server.json names a live headless server only if its pid lives and port listens."
  (let* ((home (make-temp-file "amacs-home" t))
         (amacs-home home)
         (listener (make-network-process :name "amacs-test-listener" :server t
                                         :host "127.0.0.1" :service t :noquery t))
         (port (process-contact listener :service))
         (dead (let ((p (start-process "amacs-test-dead" nil "true")))
                 (while (process-live-p p) (accept-process-output p 0.05))
                 (process-id p))))
    (unwind-protect
        (progn
          (should-not (amacs--live-headless-server)) ; no file
          (amacs-test--write-server-json
           home `((port . ,port) (pid . ,(emacs-pid)) (headless . t) (token . "tok")))
          (should (equal (amacs--live-headless-server) (list port (emacs-pid) "tok")))
          ;; A dead pid: stale.
          (amacs-test--write-server-json
           home `((port . ,port) (pid . ,dead) (headless . t) (token . "tok")))
          (should-not (amacs--live-headless-server))
          ;; Not headless (a server some Emacs started), or no token: not ours to join.
          (amacs-test--write-server-json
           home `((port . ,port) (pid . ,(emacs-pid)) (headless . :json-false)))
          (should-not (amacs--live-headless-server))
          (let ((process-environment (cons "AMACS_TOKEN" process-environment)))
            (amacs-test--write-server-json home `((port . ,port) (pid . ,(emacs-pid)) (headless . t)))
            (should-not (amacs--live-headless-server)))
          ;; A live pid whose port is closed: stale.
          (delete-process listener)
          (amacs-test--write-server-json
           home `((port . ,port) (pid . ,(emacs-pid)) (headless . t) (token . "tok")))
          (should-not (amacs--live-headless-server)))
      (when (process-live-p listener) (delete-process listener))
      (delete-directory home t))))

(ert-deftest amacs-test-start-server-joins-a-live-headless-server ()
  "Issue 9: with a live headless server in server.json, no second server is started."
  (amacs-test-with-connection conn ()
    (let ((connected nil) (started nil))
      (cl-letf (((symbol-function 'amacs--live-headless-server) (lambda (&rest _) (list 4242 99 "tok")))
                ((symbol-function 'amacs--connect-port)
                 (lambda (c proc port token &optional success)
                   (setq connected (list (eq c conn) proc port token success))))
                ((symbol-function 'amacs--start-server-process) (lambda (&rest _) (setq started t))))
        (amacs-start-server)
        (should-not started)
        (should (equal connected
                       '(t nil 4242 "tok" "Connected to the headless AMACS server on port 4242 (pid 99).")))
        (should (equal (amacs-life-token (amacs-connection-life conn)) "tok")))
      (setq connected nil)
      (cl-letf (((symbol-function 'amacs--live-headless-server) #'ignore)
                ((symbol-function 'amacs--connect-port) (lambda (&rest args) (setq connected args)))
                ((symbol-function 'amacs--start-server-process) (lambda (&rest _) (setq started t))))
        (amacs-start-server)
        (should started)
        (should-not connected)))))

(ert-deftest amacs-test-connect-says-one-line ()
  "Issue 9: `amacs-connect' reads server.json and says so once the server accepts."
  (let* ((home (make-temp-file "amacs-home" t))
         (amacs-home home)
         (amacs--connections nil)
         (connected nil))
    (unwind-protect
        (progn
          (amacs-test--write-server-json home '((port . 5151) (pid . 1) (headless . t) (token . "t0k")))
          (cl-letf (((symbol-function 'amacs--connect-port)
                     (lambda (_conn _proc port token &optional success) (setq connected (list port token success)))))
            (amacs-connect))
          (should (equal connected '(5151 "t0k" "Connected to the AMACS server on port 5151.")))
          (should (equal (amacs-life-token (amacs-connection-life (amacs-current-connection))) "t0k")))
      (delete-directory home t))))

(ert-deftest amacs-test-connect-to-another-home ()
  "`amacs-connect' with a prefix argument connects to the home it asks for.
A newcomer's finding: after `amacs-home' was changed, it still read the
first home's server.json; the home asked for is read, and its own
connection is the one opened."
  (let* ((first (make-temp-file "amacs-home" t))
         (other (make-temp-file "amacs-home" t))
         (amacs-home first)
         (amacs--connections nil)
         (connected nil))
    (unwind-protect
        (progn
          (amacs-test--write-server-json other '((port . 6161) (pid . 1) (headless . t) (token . "0ther")))
          (amacs-current-connection)    ; the first home's, as a shell's would be
          (cl-letf (((symbol-function 'amacs--connect-port)
                     (lambda (conn _proc port token &optional success)
                       (setq connected (list (amacs-connection-home conn) port token success))))
                    ((symbol-function 'read-directory-name) (lambda (&rest _) other)))
            (let ((current-prefix-arg '(4)))
              (call-interactively #'amacs-connect)))
          (should (equal connected
                         (list (directory-file-name other) 6161 "0ther"
                               (format "Connected to the AMACS server of %s on port 6161: M-x amacs-shell-open shows its shell."
                                       (abbreviate-file-name (directory-file-name other))))))
          ;; The first home has no server.json: the error names it and says how to pick another.
          (let ((err (should-error (amacs-connect) :type 'user-error)))
            (should (string-match-p (regexp-quote (expand-file-name "server.json" first)) (cadr err)))
            (should (string-match-p "C-u M-x amacs-connect" (cadr err)))))
      (delete-directory first t)
      (delete-directory other t))))

(ert-deftest amacs-test-restart-says-model-backend-and-notice ()
  "Issue 9: `amacs-restart' confirms in one line, with the notice when there is one."
  (let* ((said nil)
         (amacs-transport-message-function (lambda (text) (push text said))))
    (amacs-test-with-connection conn ()
      (cl-letf (((symbol-function 'amacs-stop-server) #'ignore)
                ((symbol-function 'amacs-start-server) #'ignore)
                ((symbol-function 'amacs-live-p) #'ignore))
        (amacs-restart)
        (should (= (length (amacs-life-on-ready (amacs-connection-life conn))) 1))
        (cl-flet ((ready-with (status)
                    "The line said when the restarted server is ready with STATUS."
                    (setq said nil)
                    (setf (amacs-wire-status (amacs-connection-wire conn)) status
                          (amacs-life-process (amacs-connection-life conn))
                          (start-process "amacs-test-live" nil "sleep" "5"))
                    (unwind-protect
                        (funcall (car (amacs-life-on-ready (amacs-connection-life conn))))
                      (delete-process (amacs-life-process (amacs-connection-life conn))))
                    said))
          (should (equal (ready-with '(:model "claude-x" :backend "anthropic" :notice nil))
                         '("AMACS server restarted: claude-x on anthropic.")))
          (should (equal (ready-with '(:model "claude-x" :backend "anthropic" :notice "No API key: set it."))
                         '("AMACS server restarted: claude-x on anthropic. No API key: set it.")))
          ;; A newcomer's M-x amacs-demo said "demo on anthropic": the demo is named as such.
          (should (equal (ready-with '(:model "demo" :backend "anthropic" :endpoint "demo"))
                         '("AMACS server restarted: the scripted demo model on this machine (no key, nothing paid)."))))))))

(ert-deftest amacs-test-restart-mid-turn-asks-first ()
  "A newcomer's finding: M-x amacs-restart mid-turn stopped the turn without asking (C-x C-c asks)."
  (amacs-test-with-connection _conn ()
   (let ((stopped nil) (asked nil))
    (cl-letf (((symbol-function 'amacs-stop-server) (lambda (&rest _) (setq stopped t)))
              ((symbol-function 'amacs-start-server) #'ignore)
              ((symbol-function 'amacs-shell-busy-p) (lambda (&rest _) t)) ; the agent works on a turn
              ((symbol-function 'amacs-live-p) (lambda (&rest _) t))
              ((symbol-function 'yes-or-no-p) (lambda (q) (push q asked) nil)))
      (should-error (call-interactively #'amacs-restart) :type 'user-error)
      (should (string-match-p "working on your turn" (car asked)))
      (should-not stopped)
      (amacs-restart)                                   ; from Lisp: no question
      (should stopped)
      (should (= (length asked) 1))))))

(ert-deftest amacs-test-entry-points-are-autoloaded ()
  "Issue 9: the commands README names carry autoload cookies in the files that define them."
  (dolist (entry '(("amacs.el" . "amacs-restart") ("amacs-server.el" . "amacs-connect")
                   ("amacs-shell-start.el" . "amacs-shell") ("amacs-hub.el" . "amacs-hub")))
    (with-temp-buffer
      (insert-file-contents (expand-file-name (car entry) (file-name-directory (locate-library "amacs"))))
      (should (re-search-forward
               (format "^;;;###autoload\n(defun %s " (regexp-quote (cdr entry))) nil t)))))

;; Issue 28: a fresh Emacs, as after M-x amacs-shell's autoload.
(defun amacs-test--in-fresh-emacs (form)
  "What FORM printed last, read; FORM runs in a fresh batch Emacs.
That Emacs has loaded amacs-shell-start only."
  (let ((out (with-temp-buffer
               (call-process
                (expand-file-name invocation-name invocation-directory) nil t nil
                "-Q" "--batch" "--eval"
                (prin1-to-string
                 `(progn
                    (setq load-path ',load-path)  ; amacs's and epc's folders
                    (load "amacs-shell-start" nil t)
                    ,form)))
               (buffer-string))))
    (car (read-from-string (car (last (split-string out "\n" t)))))))

(ert-deftest amacs-test-shell-command-starts-the-server-before-the-shell-loads ()
  "`amacs-shell' starts the server before the shell's files load (their load and GC delayed it).
Garbage collection is held past Emacs's first idle moment, until the
first turn is done and drawn, then as before."
  (should (equal (amacs-test--in-fresh-emacs
                  '(let (seen)
                     (advice-add 'amacs-start-server :override
                                 (lambda (&rest _) (push (list 'start (featurep 'amacs-shell-output)) seen)))
                     (advice-add 'amacs-shell--open :override
                                 (lambda (&rest _) (push (list 'open (featurep 'amacs-shell-output)) seen)))
                     (let ((before gc-cons-threshold))
                       (amacs-shell)
                       ;; Garbage collection waits meanwhile; the first idle moment gives it back.
                       (push (list 'gc-held (> gc-cons-threshold before)) seen)
                       ;; The first idle moment (the prompt drawn, the question's keys next): still held.
                       (dolist (timer timer-idle-list)
                         (when (< (float-time (timer--time timer)) 1) (timer-event-handler timer)))
                       (push (list 'gc-held-at-first-idle (> gc-cons-threshold before)) seen)
                       (dolist (handler (alist-get "turn-done" amacs--event-handlers nil nil #'equal))
                         (ignore-errors (funcall handler '(:type "turn-done"))))
                       (push (list 'gc-held-until-drawn (> gc-cons-threshold before)) seen)
                       (mapc #'timer-event-handler timer-list)
                       (push (list 'gc-back (= gc-cons-threshold before)) seen))
                     (prin1 (reverse seen))))
                 '((start nil) (open t) (gc-held t) (gc-held-at-first-idle t)
                   (gc-held-until-drawn t) (gc-back t)))))

(ert-deftest amacs-test-shell-start-gives-gc-back-when-idle ()
  "A person who does not ask at once gets garbage collection back after a few idle seconds."
  (should (equal (amacs-test--in-fresh-emacs
                  '(progn
                     (advice-add 'amacs-start-server :override #'ignore)
                     (advice-add 'amacs-shell--open :override #'ignore)
                     (let ((before gc-cons-threshold))
                       (amacs-shell)
                       (mapc #'timer-event-handler timer-idle-list)
                       (prin1 (= gc-cons-threshold before)))))
                 t)))

(ert-deftest amacs-test-shell-command-says-the-server-is-starting ()
  "\\[amacs-shell] says in the echo area that the server starts, until it is ready.
An empty echo area made \\[execute-extended-command] look for a shorter
name at once (~0.2 s), and the port line waited for it.  A call from
Lisp (./amacs) says nothing."
  (should (equal (amacs-test--in-fresh-emacs
                  '(let (said seen)
                     (advice-add 'amacs-start-server :override
                                 (lambda (&optional connection)
                                   (setf (amacs-life-process (amacs-connection-life connection))
                                         (start-process "amacs-test-sleep" nil "sleep" "10"))))
                     (advice-add 'amacs-shell--open :override #'ignore)
                     (advice-add 'message :after (lambda (format &rest _) (when format (push format said))))
                     (amacs-shell)
                     (push (list 'from-lisp said) seen)
                     (call-interactively #'amacs-shell)
                     (push (list 'command said amacs-shell--starting-said) seen)
                     (run-hooks 'amacs-ready-hook)
                     (push (list 'ready amacs-shell--starting-said) seen)
                     (prin1 (reverse seen))))
                 '((from-lisp nil)
                   (command ("Starting the AMACS server...") "Starting the AMACS server...")
                   (ready nil)))))

(ert-deftest amacs-test-history-ret-appends-only-the-new-entry ()
  "Issue 10: RET appends its input to the history file; the earlier entries are not rewritten."
  (let* ((home (make-temp-file "amacs-home" t)) (sent nil)
         (file (expand-file-name "shell-history" home))
         (old (concat (mapconcat (lambda (i) (format "old %d\0\n" i)) (number-sequence 1 50) "")
                      "two\nlines\0\n")))
    (with-temp-file file (insert old))
    (amacs-test--with-shell home sent
      (goto-char (point-max)) (insert "new one") (comint-send-input)
      (should (equal (with-temp-buffer (insert-file-contents file) (buffer-string))
                     (concat old "new one\0\n")))
      (amacs-shell--save-history)         ; nothing new: the file stays as it is
      (goto-char (point-max)) (insert "new\ntwo") (comint-send-input)
      (should (equal (with-temp-buffer (insert-file-contents file) (buffer-string))
                     (concat old "new one\0\nnew\ntwo\0\n"))))
    (amacs-test--with-shell home sent
      (should (equal (ring-ref comint-input-ring 0) "new\ntwo"))
      (should (equal (ring-ref comint-input-ring 2) "two\nlines")))
    (delete-directory home t)))

(ert-deftest amacs-test-history-is-trimmed-and-converted-on-read ()
  "Issue 10: a history file twice the ring's size is trimmed when read; a by-line one is converted."
  (require 'amacs-shell)                ; `amacs-shell-history-size' is bound dynamically below
  (let* ((home (make-temp-file "amacs-home" t)) (sent nil)
         (file (expand-file-name "shell-history" home))
         (amacs-shell-history-size 10))
    (with-temp-file file
      (insert (mapconcat (lambda (i) (format "entry %d\0\n" i)) (number-sequence 1 25) "")))
    (amacs-test--with-shell home sent
      (should (equal (ring-ref comint-input-ring 0) "entry 25"))
      (should (= (ring-length comint-input-ring) 10)))
    (should (equal (with-temp-buffer (insert-file-contents file) (buffer-string))
                   (mapconcat (lambda (i) (format "entry %d\0\n" i)) (number-sequence 16 25) "")))
    (with-temp-file file (insert "first\nsecond\n"))
    (amacs-test--with-shell home sent
      (goto-char (point-max)) (insert "third") (comint-send-input))
    (should (equal (with-temp-buffer (insert-file-contents file) (buffer-string))
                   "first\0\nsecond\0\nthird\0\n"))
    (delete-directory home t)))

(ert-deftest amacs-test-hub-asks-the-server-only-when-shown ()
  "Issue 10: a tick redraws the hub only if it is shown; a hidden one is redrawn when shown again."
  (let ((asked 0) (buffer (get-buffer-create amacs-hub-buffer-name)))
    (unwind-protect
        (cl-letf (((symbol-function 'amacs-live-p) (lambda (&rest _) t))
                  ((symbol-function 'amacs-call)
                   (lambda (method &rest _) (when (eq method 'hub_state) (setq asked (1+ asked))))))
          (with-current-buffer buffer (amacs-hub-mode))
          (save-window-excursion
            (switch-to-buffer "*scratch*")
            (delete-other-windows)
            (amacs-hub--on-tick nil)          ; hidden: nothing asked
            (amacs-hub--on-tick nil)
            (should (= asked 0))
            (should (buffer-local-value 'amacs-hub--stale buffer))
            (switch-to-buffer buffer)
            (amacs-hub--on-shown (selected-window)) ; what redisplay runs once it is shown
            (should (= asked 1))
            (should-not (buffer-local-value 'amacs-hub--stale buffer))
            (amacs-hub--on-shown (selected-window)) ; not stale: nothing more
            (should (= asked 1))
            (amacs-hub--on-tick nil)          ; shown: redrawn each tick
            (should (= asked 2))
            (run-hooks 'amacs-ready-hook)     ; a new server (M-x amacs-restart): redrawn too
            (should (= asked 3))))
      (kill-buffer buffer))))

(ert-deftest amacs-test-hub-transcripts-and-commits-are-named-per-home ()
  "Two homes' hubs show a task's transcript in two buffers, each naming its home but `amacs-home''s."
  (let* ((amacs-home (make-temp-file "amacs-home-a" t))
         (other (make-temp-file "amacs-home-b" t))
         (amacs--connections nil) (amacs--current nil)
         (mine (amacs-connection-for amacs-home))
         (theirs (amacs-connection-for other))
         (shown nil))
    (unwind-protect
        (cl-letf (((symbol-function 'amacs-call)
                   (lambda (_method args &optional callback _errback)
                     (funcall callback (format "transcript of %s in %s" (car args) (amacs-connection-name)))))
                  ((symbol-function 'amacs-hub--show-beside-shell) (lambda (buffer) (push buffer shown)))
                  ((symbol-function 'recenter) #'ignore))
          (should (equal (amacs-connection-buffer-name mine "commit") "*amacs-commit*"))
          (should (equal (amacs-connection-buffer-name theirs "commit")
                         (format "*amacs-commit: %s*" (abbreviate-file-name other))))
          (let ((amacs--current mine)) (amacs-hub--show-transcript "task-1"))
          (let ((amacs--current theirs)) (amacs-hub--show-transcript "task-1"))
          (should (equal (mapcar #'buffer-name (reverse shown))
                         (list "*amacs-transcript task-1*"
                               (format "*amacs-transcript task-1: %s*" (abbreviate-file-name other)))))
          (should (string-match-p (regexp-quote (abbreviate-file-name other))
                                  (with-current-buffer (car shown) (buffer-string)))))
      (mapc #'kill-buffer shown)
      (delete-directory amacs-home t)
      (delete-directory other t))))

;; A newcomer forked and pressed C-c C-v in the fork's shell: the hub was named
;; after the fork but showed `amacs-home''s mind (its new buffer took the default home).
(ert-deftest amacs-test-hub-opened-from-another-homes-shell-is-that-homes ()
  "The hub opened from a buffer of another home's connection asks and names that home."
  (let* ((amacs-home (make-temp-file "amacs-home-a" t))
         (other (make-temp-file "amacs-home-b" t))
         (amacs--connections nil) (amacs--current nil)
         (mine (amacs-connection-for amacs-home))
         (theirs (amacs-connection-for other))
         (asked nil) (hub nil))
    (unwind-protect
        (cl-letf (((symbol-function 'amacs-when-ready) (lambda (fn) (funcall fn)))
                  ((symbol-function 'amacs-call)
                   (lambda (_method _args &optional _callback _errback)
                     (push (amacs-current-connection) asked)))
                  ((symbol-function 'pop-to-buffer) #'ignore))
          (with-temp-buffer               ; the fork's shell, as far as the hub can tell
            (setq amacs--buffer-connection theirs)
            (setq hub (amacs-hub)))
          (should (eq (buffer-local-value 'amacs--buffer-connection hub) theirs))
          (should (eq (amacs-ui-hub (amacs-connection-ui theirs)) hub))
          (should-not (amacs-ui-hub (amacs-connection-ui mine)))
          (should (equal asked (list theirs)))
          (should (string-match-p (regexp-quote (abbreviate-file-name other)) (buffer-name hub))))
      (when (buffer-live-p hub) (kill-buffer hub))
      (delete-directory amacs-home t)
      (delete-directory other t))))

;; What a newcomer saw in tmux: a refresh put point at the top of the hub,
;; the mode line said it was modified, and k on an ended task said nothing.
(defun amacs-test--hub-state (task-state)
  "A hub state whose task-2 is in TASK-STATE."
  (list :identity "a" :tick 1 :mood "m" :confidence 0.5
        :budget '(:cost-so-far 0.0 :budget-limit 5.0 :pressure "low")
        :session '(:input-tokens 1 :output-tokens 1 :cache-read-tokens 0 :cache-write-tokens 0 :cost 0.0)
        :model "m" :threads nil :chat-log "/tmp/agent-chat.org"
        :agents (list '(:id "primary" :type "primary" :template "core" :state "idle" :steps 0 :cost 0.0)
                      '(:id "task-1" :type "task" :template "r" :state "done" :ended t :steps 1 :cost 0.0)
                      (list :id "task-2" :type "task" :template "r" :state task-state
                            :ended (equal task-state "done") :steps 0 :cost 0.0))))

(ert-deftest amacs-test-hub-refresh-keeps-point-and-leaves-it-unmodified ()
  "A refresh keeps point, in the buffer and in a window not selected, on the
same agent's line; the hub is not modified; k or z on an ended agent says so at once."
  (let ((buffer (get-buffer-create amacs-hub-buffer-name)) (asked nil) (said nil))
    (unwind-protect
        (cl-letf (((symbol-function 'amacs-hub-refresh) #'ignore)
                  ((symbol-function 'message) (lambda (&rest args) (setq said (apply #'format args))))
                  ((symbol-function 'amacs-call) (lambda (&rest args) (push args asked)))
                  ((symbol-function 'y-or-n-p) (lambda (_) t)))
          (save-window-excursion
            (delete-other-windows)
            (amacs-hub)
            (amacs-hub--render (amacs-test--hub-state "running"))
            (should-not (buffer-modified-p buffer))
            (goto-char (point-min))
            (search-forward "task-2")
            (let ((line (line-number-at-pos))
                  (hub-window (selected-window)))
              (select-window (split-window))   ; the person goes to another window (C-x o)
              (switch-to-buffer "*scratch*")
              (amacs-hub--render (amacs-test--hub-state "done"))
              (should (= line (with-current-buffer buffer (line-number-at-pos (window-point hub-window)))))
              (with-current-buffer buffer
                (should (= line (line-number-at-pos)))
                (should-not (buffer-modified-p))
                (goto-char (window-point hub-window))
                (amacs-hub-cancel-agent "task-2")
                (should (equal said "AMACS: task-2 has already ended (done)"))
                (setq said nil)
                (amacs-hub-pause-agent "task-2")   ; z too: said at once, nothing asked of the server
                (should (equal said "AMACS: task-2 has already ended (done)"))
                ;; t too, before asking for the text (it asked "Say to task-2:" first).
                (cl-letf (((symbol-function 'read-string) (lambda (&rest _) (error "Asked for text"))))
                  (should (equal (cadr (should-error (call-interactively #'amacs-hub-talk-to-agent)
                                                     :type 'user-error))
                                 "AMACS: task-2 has already ended (done)")))
                (should-not asked)))))
      (kill-buffer buffer))))

(ert-deftest amacs-test-the-hub-says-it-has-the-cursor ()
  "A newcomer opened the hub (C-c C-v), then pressed C-x o to reach it: the cursor was in
it already, and went back to the shell.  Opening it from another window says where it is."
  (let ((buffer (get-buffer-create amacs-hub-buffer-name)) (said nil))
    (unwind-protect
        (cl-letf (((symbol-function 'amacs-hub-refresh) #'ignore)
                  ((symbol-function 'message) (lambda (&rest args) (setq said (apply #'format args)))))
          (save-window-excursion
            (delete-other-windows)
            (switch-to-buffer "*scratch*")    ; the shell, as far as the hub can tell
            (let ((from (selected-window)))
              (amacs-hub)
              (should (eq (window-buffer (selected-window)) buffer))
              (should-not (eq (selected-window) from))
              (should (equal said "AMACS: the cursor is in the hub; q goes back (h: its keys)"))
              (setq said nil)
              (amacs-hub)                      ; from the hub itself: nothing to say
              (should-not said))))
      (kill-buffer buffer))))

(ert-deftest amacs-test-hub-last-eval-shows-memory-addresses-without-eot-marks ()
  "The hub's last eval result showed `<EOT>...<EOT>' as the shell did."
  (let ((buffer (get-buffer-create amacs-hub-buffer-name)))
    (unwind-protect
        (cl-letf (((symbol-function 'amacs-hub-refresh) #'ignore))
          (save-window-excursion
            (amacs-hub)
            (amacs-hub--render (append '(:last-eval (:tick 1 :success t :result "(:mem-id \"<EOT>a:primary:x:1<EOT>\")"))
                                       (amacs-test--hub-state "done")))
            (should (string-search "tick 1 ok: (:mem-id \"a:primary:x:1\")" (buffer-string)))
            (should-not (string-search "<EOT>" (buffer-string)))))
      (kill-buffer buffer))))

(ert-deftest amacs-test-a-forks-chat-log-opens-below-its-shell ()
  "C-c C-l in a fork's shell, beside its parent's, put the fork's agent-chat.org in the parent
shell's window: a newcomer read it as the parent's log.  It goes below the fork's shell."
  (let ((parent (get-buffer-create "parent-shell"))
        (fork (get-buffer-create "fork-shell"))
        (log (get-buffer-create "fork-chat-log")))
    (unwind-protect
        (save-window-excursion
          (delete-other-windows)
          (switch-to-buffer parent)
          (select-window (split-window-right))
          (switch-to-buffer fork)
          (cl-letf (((symbol-function 'amacs-hub--shell-window-p)
                     (lambda (window) (memq (window-buffer window) (list parent fork)))))
            (amacs-hub--show-beside-shell log))
          (should (eq (window-buffer) log))
          (should (get-buffer-window parent))
          (should (= (window-left-column) (window-left-column (get-buffer-window fork))))
          (should (< (window-top-line (get-buffer-window fork)) (window-top-line))))
      (mapc #'kill-buffer (list parent fork log)))))

;;;; Memory (issue 13: load pages long items)

(ert-deftest amacs-test-memory-load-version-and-paging-options ()
  "`agent-memory-load' sends VERSION and the paging options as one plist.
VERSION may be given by position, as :version, or left out."
  (let (sent)
    (cl-letf (((symbol-function 'amacs--call-sync)
               (lambda (_method args) (push (nthcdr 2 args) sent) nil)))
      (let ((amacs-current-eval 7))
        (agent-memory-load "<EOT>a:primary:x<EOT>")
        (agent-memory-load "<EOT>a:primary:x<EOT>" 2)
        (agent-memory-load "<EOT>a:primary:x<EOT>" :offset 8000 :limit 100)
        (agent-memory-load "<EOT>a:primary:x<EOT>" 2 :offset 10)
        (agent-memory-load "<EOT>a:primary:x<EOT>" nil :limit 5)))
    (should (equal (nreverse sent)
                   '((nil) ((:version 2)) ((:offset 8000 :limit 100))
                     ((:version 2 :offset 10)) ((:limit 5)))))))

(provide 'amacs-test)
;;; amacs-test.el ends here
