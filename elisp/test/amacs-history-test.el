;;; amacs-history-test.el --- ERT tests for the rewind and fork pickers -*- lexical-binding: t -*-

;;; Commentary:

;; The picker of `amacs-rewind' and `amacs-fork' (amacs-history.el), with the
;; server's answers stubbed: which inputs it offers, in which order, and its
;; default.  tests/e2e/test_rewind_session.py and tests/tmux/test_terminal_history.py
;; drive it against the real server.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'amacs)
(require 'amacs-history)
(require 'amacs-shell-test)             ; `amacs-shell-test--with-shell'
(require 'amacs-hub)
(require 'amacs-test-helpers)

(defun amacs-history-test--inputs (count &optional before page)
  "What the server's past_inputs answers for COUNT inputs \"input N\": newest first.
BEFORE: those before that tick only; PAGE (default 200): at most that many."
  (let* ((newest (min count (1- (or before (1+ count)))))
         (oldest (max 1 (1+ (- newest (or page 200))))))
    (list :ticks (number-sequence newest oldest -1)
          :texts (cl-loop for tick downfrom newest to oldest collect (format "input %d" tick))
          :times (cl-loop for tick downfrom newest to oldest collect "2026-11-27T14:02:00Z")
          :more (and (> oldest 1) t))))

(defmacro amacs-history-test--picking (count answer &rest body)
  "Run BODY with COUNT past inputs on the server and the picker answered by ANSWER.
ANSWER is called with the prompt, the labels offered (in the order the
completion UI shows them) and the default; what it returns is chosen.
The prompt, labels and default the picker showed last are bound in BODY
as `prompt', `labels' and `default'; the pages the server was asked for
\(the BEFORE of each) as `asked'.  The server's pages are 5 inputs."
  (declare (indent 2))
  `(let (prompt labels default asked)
     (cl-letf (((symbol-function 'amacs--call-sync)
                (lambda (method args)
                  (should (eq method 'past_inputs))
                  (push (car args) asked)
                  (amacs-history-test--inputs ,count (car args) 5)))
               ((symbol-function 'completing-read)
                (lambda (p table &optional _pred _req _init _hist def &rest _)
                  (let* ((sort (completion-metadata-get (completion-metadata "" table nil)
                                                        'display-sort-function))
                         (all (all-completions "" table)))
                    (setq prompt p labels (if sort (funcall sort all) (sort all #'string<)) default def)
                    (funcall ,answer p labels def)))))
       ,@body)))

(ert-deftest amacs-history-test-the-picker-offers-the-newest-inputs-by-their-words ()
  "The newest past inputs are offered newest first (not sorted as text),
by their words: no tick numbers; the newest the default, named in a
prompt that says what the person will get: back to before they typed it."
  (amacs-history-test--picking 4 (lambda (_p _labels def) def)
    (should (equal (amacs-history--read-input "go back") '(3 "input 4" nil)))
    (should (equal labels '("input 4" "input 3" "input 2" "input 1")))
    (should (equal default "input 4"))
    (should (equal prompt "Go back to before you typed (default input 4, your last input): "))))

(ert-deftest amacs-history-test-older-inputs-come-a-page-at-a-time ()
  "A page ends with the choice of older inputs; chosen, the next page is
asked for (before the oldest tick shown), and one of it can be picked."
  (let ((step 0))
    (amacs-history-test--picking 12 (lambda (_p labels _def)
                                      (setq step (1+ step))
                                      (if (= step 1) (car (last labels)) (nth 1 labels)))
      (should (equal (amacs-history--read-input "fork") '(5 "input 6" nil)))
      (should (equal (reverse asked) '(nil 8)))
      (should (equal labels (list "input 7" "input 6" "input 5" "input 4" "input 3"
                                  amacs-history--older)))))
  (amacs-history-test--picking 3 (lambda (_p labels _def) (car (last labels)))
    (should-not (member amacs-history--older labels))
    (should-error (amacs-history--read-input "go back") :type 'user-error)))

(ert-deftest amacs-history-test-an-input-typed-again-is-told-apart-by-when ()
  "The same words typed twice are two choices, each saying when it was typed.
A newcomer saw `note' and `note  (typed ...)': the newest said no time,
so which was which had to be inferred.  A copy typed in the minute of
another says its second."
  (cl-letf (((symbol-function 'amacs--call-sync)
             (lambda (&rest _) (list :ticks [9 4 2] :texts ["yes" "yes" "yes"]
                                     :times ["2026-11-27T14:02:00Z" "2026-11-27T13:00:00Z"
                                             "2026-11-27T13:00:00Z"]))))
    (let ((labels (mapcar #'car (car (amacs-history--page)))))
      (should (string-match-p "\\`yes  (typed Nov 27 [0-9][0-9]:02)\\'" (car labels))) ; its own minute
      (should (string-match-p "\\`yes  (typed Nov 27 [0-9][0-9]:00:00)\\'" (nth 1 labels))) ; one minute: its second
      (should (equal (nth 2 labels) (concat (nth 1 labels) " #2"))))))

(ert-deftest amacs-history-test-rewind-says-what-the-person-will-see ()
  "The question and the shell's line name the input, not a tick."
  (let (question)
    (amacs-history-test--picking 4 (lambda (_p labels _def) (nth 1 labels))
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (q) (setq question q) nil)))
        (should-error (call-interactively #'amacs-rewind) :type 'user-error)))
    (should (string-suffix-p "Go back to before you typed «input 3»? " question))
    (should-not (string-match-p "tick" question))))

(ert-deftest amacs-history-test-rewind-says-which-of-the-same-words-it-goes-before ()
  "A newcomer typed the same question twice in one minute: the picker showed it
twice, and the question \"Go back to before you typed «…»?\" did not say which.
The question and the shell's line say when it was typed, to the second, and
which of how many alike; words typed once are asked about as before."
  (let (question)
    (cl-letf (((symbol-function 'amacs--call-sync)
               (lambda (&rest _) (list :ticks [9 4 2] :texts ["note" "yes" "yes"]
                                       :times ["2026-11-27T14:02:09Z" "2026-11-27T13:00:45Z"
                                               "2026-11-27T13:00:12Z"])))
              ((symbol-function 'completing-read)
               (lambda (_p table &rest _) (nth 2 (all-completions "" table))))
              ((symbol-function 'yes-or-no-p) (lambda (q) (setq question q) nil)))
      (should (equal (amacs-history--read-input "go back")
                     (list 1 "yes" (amacs-history--which "2026-11-27T13:00:12Z" 2 2))))
      (should-error (call-interactively #'amacs-rewind) :type 'user-error)
      ;; The picker's label of the older copy, typed in the newer one's minute, has its second.
      (should (string-match-p "\\`yes  (typed Nov 27 [0-9]+:00:12)\\'"
                              (nth 2 (mapcar #'car (car (amacs-history--page)))))))
    (should (string-match-p "Go back to before you typed «yes» (the one typed Nov 27 [0-9]+:00:12, \
the oldest of 2)\\? \\'" question))
    (should (equal (amacs-history--which "2026-11-27T13:00:45Z" 2 3)
                   (format "the one typed %s, the 2nd newest of 3"
                           (amacs-history--when "2026-11-27T13:00:45Z" t))))
    (should (string-match-p ":45\\'" (amacs-history--when "2026-11-27T13:00:45Z" t)))))

(ert-deftest amacs-history-test-the-input-point-is-on-is-the-default ()
  "In the shell, the past input point is on is the default; after RET on it
\(which puts it at the prompt) too."
  (amacs-shell-test--with-shell
    (dolist (text '("input 3" "input 4" "input 5"))
      (amacs-shell-test--type-and-send text)
      (amacs-shell--on-input-taken nil)
      (amacs-shell--on-reply (list :type "reply" :text (concat "answer to " text))))
    (goto-char (point-min))
    (search-forward "input 4")
    (backward-char 2)
    (amacs-history-test--picking 5 (lambda (_p _labels def) def)
      (should (equal (amacs-history--read-input "go back") '(3 "input 4" nil)))
      (should (equal default "input 4"))
      (should (equal prompt "Go back to before you typed (default input 4, the input at point): ")))
    (amacs-shell-return)                ; the past input, at the prompt
    (should (= (point) (point-max)))
    (amacs-history-test--picking 5 (lambda (_p _labels def) def)
      (should (equal (amacs-history--read-input "go back") '(3 "input 4" nil))))))

(ert-deftest amacs-history-test-the-choices-are-listed-at-once ()
  "A newcomer's finding: in Emacs -Q the picker showed no choice until TAB, and
RET by reflex took the default.  Where no completion UI lists them, the
choices are listed as the minibuffer opens; the input at point is named so."
  (let (listed)
    (cl-letf (((symbol-function 'amacs--call-sync) (lambda (&rest _) (amacs-history-test--inputs 4)))
              ((symbol-function 'minibuffer-completion-help) (lambda (&rest _) (setq listed t)))
              ((symbol-function 'completing-read)
               (lambda (&rest _) (with-temp-buffer (run-hooks 'minibuffer-setup-hook)) "input 3")))
      (let ((completing-read-function #'completing-read-default))
        (amacs-history--read-input "go back"))
      (should listed)
      (setq listed nil)
      (let ((completing-read-function (lambda (&rest _) nil)))  ; a UI of its own lists them
        (amacs-history--read-input "go back"))
      (should-not listed))))

(ert-deftest amacs-history-test-no-completions-window-is-left ()
  "A *Completions* window shown while picking (TAB) is gone once one is chosen."
  (save-window-excursion
    (delete-other-windows)
    (cl-letf (((symbol-function 'amacs--call-sync) (lambda (&rest _) (amacs-history-test--inputs 4)))
              ((symbol-function 'completing-read)
               (lambda (&rest _)
                 (display-buffer (get-buffer-create "*Completions*") '(display-buffer-pop-up-window))
                 "input 3")))
      (should (equal (amacs-history--read-input "go back") '(2 "input 3" nil)))
      (should-not (get-buffer-window "*Completions*" 0))
      (should (one-window-p)))))

(ert-deftest amacs-history-test-the-fork-proposes-a-new-folder-named-after-the-home ()
  "`amacs-fork' proposes a folder that does not exist yet: RET makes a new home, not ~/."
  (let* ((amacs-fork-directory (make-temp-file "amacs-fork-test" t))
         (connection (amacs--make-connection :home "/tmp/somewhere/.agent")))
    (unwind-protect
        (cl-letf (((symbol-function 'amacs-current-connection) (lambda () connection)))
          (should (equal (amacs-history--fork-name 3) "agent-fork-tick-3"))
          (make-directory (expand-file-name "agent-fork-tick-3" amacs-fork-directory))
          (should (equal (amacs-history--fork-name 3) "agent-fork-tick-3-2")))
      (delete-directory amacs-fork-directory t))))

(ert-deftest amacs-history-test-the-fork-is-proposed-next-to-its-home ()
  "A newcomer forking /tmp/nc-home was offered ~/nc-home-fork-tick-4: the fork goes beside its home."
  (let* ((parent (make-temp-file "amacs-fork-test" t))
         (home (expand-file-name "nc-home" parent))
         (amacs-fork-directory nil)
         (connection (amacs--make-connection :home home))
         (asked nil))
    (unwind-protect
        (cl-letf (((symbol-function 'amacs-current-connection) (lambda () connection))
                  ((symbol-function 'amacs-history--read-fork-tick) (lambda (&rest _) '(4 "input 5" nil)))
                  ((symbol-function 'read-directory-name)
                   (lambda (_prompt dir _default _mustmatch initial)
                     (setq asked (list dir initial))
                     (throw 'amacs-history-test-asked nil))))
          (catch 'amacs-history-test-asked (call-interactively #'amacs-fork))
          (should (equal asked (list (file-name-as-directory parent) "nc-home-fork-tick-4")))
          ;; Set, the option still names the folder.
          (let ((amacs-fork-directory "~/forks"))
            (should (equal (amacs-history--fork-directory) "~/forks/"))))
      (delete-directory parent t))))

(ert-deftest amacs-history-test-the-fork-offers-now-first-and-as-the-default ()
  "`amacs-fork' offers the mind as it is now first, as the default; a past
input after it forks at the tick before that input."
  (amacs-history-test--picking 3 (lambda (_p _labels def) def)
    (should (equal (amacs-history--read-fork-tick) '("now" nil nil)))
    (should (equal labels (cons amacs-history--now '("input 3" "input 2" "input 1"))))
    (should (equal default amacs-history--now)))
  (amacs-history-test--picking 3 (lambda (_p labels _def) (nth 1 labels))
    (should (equal (amacs-history--read-fork-tick) '(2 "input 3" nil))))
  (let ((connection (amacs--make-connection :home "/tmp/somewhere/.agent")))
    (cl-letf (((symbol-function 'amacs-current-connection) (lambda () connection)))
      (should (equal (amacs-history--fork-name "now") "agent-fork-now")))))

(ert-deftest amacs-history-test-a-fork-runs-where-its-parent-runs ()
  "The fork's server gets its parent's choices and the model, backend and URL
the parent's server runs on; a parent running the model itself keeps :local."
  (let ((parent (amacs--make-connection :home "/tmp/p" :life (amacs--make-life :chosen (list :budget 3))))
        (done (list :backend "openai" :model "m-1" :base-url "http://127.0.0.1:9/v1")))
    (should (equal (amacs-history--fork-choices parent done)
                   (list :budget 3 :backend "openai" :model "m-1" :base-url "http://127.0.0.1:9/v1")))
    (should (equal (amacs-life-chosen (amacs-connection-life parent)) (list :budget 3))))
  (let ((parent (amacs--make-connection
                 :home "/tmp/p"
                 :life (amacs--make-life :chosen (list :backend "openai" :model "smollm2"
                                                       :local (list "py" "m.gguf"))))))
    (should (equal (amacs-history--fork-choices parent (list :backend "openai" :model "smollm2"))
                   (list :backend "openai" :model "smollm2" :local (list "py" "m.gguf"))))))

(ert-deftest amacs-history-test-a-replay-starts-with-the-input-of-its-first-turn ()
  "The shell resumed after a rewind shows whole turns: when the last
exchanges begin with a later step of a turn, the steps back to its input
are shown too."
  (let ((entries (list (list :human "one" :agent "a1") (list :human "two" :agent "")
                       (list :agent "evaluated") (list :agent "two's answer")
                       (list :human "three" :agent "a3"))))
    (should (equal (mapcar (lambda (e) (plist-get e :agent)) (amacs-shell--from-an-input entries 2))
                   '("" "evaluated" "two's answer" "a3")))
    (should (equal (amacs-shell--from-an-input entries 1) (last entries)))
    (should (equal (amacs-shell--from-an-input entries 9) entries))
    (should-not (amacs-shell--from-an-input entries 0))))

(defun amacs-history-test--git (home &rest args)
  "Run git with ARGS in HOME; its output, trimmed (an error if it fails)."
  (with-temp-buffer
    (unless (zerop (apply #'call-process "git" nil t nil "-C" home args))
      (error "Git %S failed: %s" args (buffer-string)))
    (string-trim (buffer-string))))

(ert-deftest amacs-history-test-the-hub-shows-an-abandoned-future-as-light-as-a-commit ()
  "Was: the hub drew an abandoned future's whole log with every patch, the
transcripts' moved lines (whole model requests) among them.  Now its view
is each commit's stat, and RET on a commit draws that commit's patch of
the mind's files; the moved lines are listed in the stat, not drawn."
  (amacs-test-with-connection connection ()
    (let* ((home (directory-file-name amacs-home))
           (request (make-string 200000 ?r))
           (process-environment (append '("GIT_AUTHOR_NAME=t" "GIT_AUTHOR_EMAIL=t@t" "GIT_COMMITTER_NAME=t"
                                          "GIT_COMMITTER_EMAIL=t@t")
                                        process-environment))
           future moved)
      (amacs-history-test--git home "init" "-q")
      (with-temp-file (expand-file-name "agent-chat.org" home) (insert "* Tick 1\nfirst words\n"))
      (amacs-history-test--git home "add" "-A")
      (amacs-history-test--git home "commit" "-qm" "[TICK 1][no-thread] first")
      (with-temp-file (expand-file-name "agent-chat.org" home) (insert "* Tick 1\nfirst words\n* Tick 2\nthird words\n"))
      (amacs-history-test--git home "commit" "-qam" "[TICK 2][no-thread] second")
      (make-directory (expand-file-name "transcripts" home))
      (with-temp-file (expand-file-name "transcripts/s.jsonl" home) (insert "{\"request\": \"" request "\"}\n"))
      (amacs-history-test--git home "add" "-A")
      (amacs-history-test--git home "commit" "-qm" "[TICK 2][abandoned] the transcripts' and logs' lines after tick 1")
      (setq moved (amacs-history-test--git home "rev-parse" "HEAD"))
      (amacs-history-test--git home "update-ref" "refs/amacs/abandoned/x-tick-2-to-1" moved)
      (amacs-history-test--git home "reset" "-q" "--hard" "HEAD~2")
      (setq future (list :ref "refs/amacs/abandoned/x-tick-2-to-1" :to-tick 1 :from-tick 2))
      (unwind-protect
          (progn
            (with-temp-buffer
              (setq-local amacs-hub--state (list :home home))
              (amacs-hub--show-abandoned future))
            (with-current-buffer (amacs-connection-buffer-name connection "abandoned")
              (should (< (buffer-size) 3000))
              (should (string-search "[TICK 2][no-thread] second" (buffer-string)))
              (should (string-search " transcripts/s.jsonl | " (buffer-string)))
              (should-not (string-search "rrrrrrrr" (buffer-string)))
              (should-not (string-search "+third words" (buffer-string)))
              (goto-char (point-min))
              (re-search-forward "^[0-9a-f]+ \\[TICK 2\\]\\[abandoned\\] the transcripts")
              ;; RET on its stat's line is RET on the commit: a newcomer who moved by
              ;; lines landed on a stat, and RET scrolled the view.
              (re-search-forward "transcripts/s.jsonl")
              (should (eq (key-binding (kbd "RET")) #'push-button))
              (push-button (point)))
            (with-current-buffer (amacs-connection-buffer-name connection "commit")
              (should (< (buffer-size) 3000))
              (should (string-search " transcripts/s.jsonl | " (buffer-string)))
              (should (string-search "are listed above, not drawn" (buffer-string)))
              (should-not (string-search "rrrrrrrr" (buffer-string))))
            (with-temp-buffer           ; a commit of the mind's files: its patch, as before
              (setq-local amacs-hub--state (list :home home))
              (amacs-hub--show-commit (concat moved "~1")))
            (with-current-buffer (amacs-connection-buffer-name connection "commit")
              (should (string-search "+third words" (buffer-string)))
              (should-not (string-search "not drawn" (buffer-string)))))
        (dolist (name '("abandoned" "commit"))
          (let ((buffer (get-buffer (amacs-connection-buffer-name connection name))))
            (when buffer (kill-buffer buffer))))
        (delete-directory home t)))))

;; Was: the log was in view-mode, whose n and p (search again) shadowed the
;; buffer's own keys ("No previous View-mode search"), and RET on a commit
;; moved point into the commit's buffer, so the next n went there.
(ert-deftest amacs-history-test-n-then-ret-walks-an-abandoned-futures-commits ()
  "In an abandoned future's log, n and p go to the next and previous commit
and RET shows the commit in the other window, point staying in the log."
  (amacs-test-with-connection connection ()
    (let* ((home (directory-file-name amacs-home))
           (process-environment (append '("GIT_AUTHOR_NAME=t" "GIT_AUTHOR_EMAIL=t@t" "GIT_COMMITTER_NAME=t"
                                          "GIT_COMMITTER_EMAIL=t@t")
                                        process-environment)))
      (amacs-history-test--git home "init" "-q")
      (dotimes (i 4)
        (with-temp-file (expand-file-name "agent-chat.org" home) (insert (format "* Tick %d\n" (1+ i))))
        (amacs-history-test--git home "add" "-A")
        (amacs-history-test--git home "commit" "-qm" (format "[TICK %d][t] words %d" (1+ i) (1+ i))))
      (amacs-history-test--git home "update-ref" "refs/amacs/abandoned/y" "HEAD")
      (amacs-history-test--git home "reset" "-q" "--hard" "HEAD~3")
      (unwind-protect
          (save-window-excursion
            (delete-other-windows)
            (with-temp-buffer
              (setq-local amacs-hub--state (list :home home))
              (amacs-hub--show-abandoned (list :ref "refs/amacs/abandoned/y" :to-tick 1 :from-tick 4)))
            (let ((log (set-buffer (window-buffer (selected-window))))
                  (subject (lambda () (buffer-substring (line-beginning-position) (line-end-position)))))
              (should (equal (buffer-name log) (amacs-connection-buffer-name connection "abandoned")))
              (should (string-match-p "words 4\\'" (funcall subject)))
              (call-interactively (key-binding "n"))
              (should (string-match-p "words 3\\'" (funcall subject)))
              (call-interactively (key-binding "n"))
              (should (string-match-p "words 2\\'" (funcall subject)))
              (call-interactively (key-binding "p"))
              (should (string-match-p "words 3\\'" (funcall subject)))
              (call-interactively (key-binding (kbd "RET")))
              (should (eq (window-buffer (selected-window)) log))
              (let ((commit (get-buffer (amacs-connection-buffer-name connection "commit"))))
                (should (get-buffer-window commit))
                (should (string-search "words 3" (with-current-buffer commit (buffer-string)))))
              (call-interactively (key-binding "n"))
              (call-interactively (key-binding (kbd "RET")))
              (should (eq (window-buffer (selected-window)) log))
              (should (string-search "words 2" (with-current-buffer (amacs-connection-buffer-name connection "commit")
                                                  (buffer-string))))))
        (dolist (name '("abandoned" "commit"))
          (let ((buffer (get-buffer (amacs-connection-buffer-name connection name))))
            (when buffer (kill-buffer buffer))))
        (delete-directory home t)))))

(provide 'amacs-history-test)
;;; amacs-history-test.el ends here
