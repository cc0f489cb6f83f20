;;; amacs-eval.el --- Evaluate the agent's elisp, errors as data -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The agent's hands (ARCHITECTURE.md, The transport).  The server sends a
;; form as a string; it is read and evaluated inside `condition-case',
;; and the printed value or the error message goes back as data.
;;
;; A time limit cannot be enforced from inside Emacs: a loop such as
;; (while t) never lets a timer run.  So the server watches the clock,
;; and past `amacs-eval-timeout' it sends this Emacs SIGUSR1.  While an
;; eval runs, `debug-on-event' is bound to `sigusr1', which makes Emacs
;; set `quit-flag'; the loop quits, `condition-case' catches the quit,
;; and the eval comes back as an error.  `debugger' is bound to a
;; function that does nothing, so the debugger never opens.  Outside an
;; eval, SIGUSR1 is an ordinary (ignored) event.
;;
;; While an eval runs, the files it reads and writes are noted for the
;; server's World (the files each agent has seen, so it can be told what
;; changed since): a file name handler that takes only
;; `insert-file-contents' and the primitives that write, copy, rename,
;; link or delete a file (and asks the person first under
;; `amacs-eval-confirm' `writes'), and an advice on `find-file-noselect'
;; (a buffer that already visits its file is a read too).  Both are there for the eval only and go away after it,
;; however it ends; the result carries :files-read and :files-written.

;;; Code:

(require 'amacs-transport)
(require 'cl-lib)

(defcustom amacs-eval-result-max-chars 20000
  "Longest printed eval result sent back to the agent; longer ones are cut."
  :type 'integer
  :group 'amacs)

(defcustom amacs-display-agent-buffers nil
  "Whether buffers the agent's eval visits are shown to you.
nil: never; the agent works in the background and your windows stay
as they are.  t: each buffer the eval visited or displayed is shown in
another window (never the shell's)."
  :type '(choice (const :tag "Never" nil) (const :tag "In another window" t))
  :group 'amacs)

(defun amacs--show-agent-buffers (buffers)
  "Show BUFFERS in other windows when `amacs-display-agent-buffers' is non-nil."
  (when amacs-display-agent-buffers
    (dolist (buffer buffers)
      (when (and (buffer-live-p buffer) (not (get-buffer-window buffer)))
        (display-buffer buffer '((display-buffer-use-some-window display-buffer-pop-up-window)
                                 (inhibit-same-window . t)))))))

(defun amacs--eval-ignore-debugger (&rest _)
  "Do nothing: stands in for `debugger' during the agent's eval."
  (setq debug-on-next-call nil)
  nil)

(defun amacs--read-forms (text)
  "Read every form in TEXT; return one form (several are wrapped in `progn').
Signals `amacs-unreadable' when TEXT is not readable elisp."
  (let ((pos 0) forms)
    (condition-case err
        (while (string-match-p "[^[:space:]]"
                               (replace-regexp-in-string ";[^\n]*" "" (substring text pos)))
          (let ((read (read-from-string text pos)))
            (push (car read) forms)
            (setq pos (cdr read))))
      (error (signal 'amacs-unreadable (list (error-message-string err)))))
    (cond ((null forms) (signal 'amacs-unreadable '("empty eval")))
          ((cdr forms) (cons 'progn (nreverse forms)))
          (t (car forms)))))

(define-error 'amacs-unreadable "Unreadable elisp")

(defvar amacs-current-agent "primary"
  "The agent whose eval is running, for the eval to read.
The server never takes it from Emacs: it knows which agent each eval
runs for, so binding this changes nobody's identity.")

(defvar amacs-current-eval nil
  "The server's id of the eval that is running, or nil outside one.
The agent functions send it; the server acts for the agent it sent
that eval for, and refuses an id that names no running eval.")

(defvar amacs--eval-talks nil
  "While an eval runs, the talks it started: an alist (TALK-ID . WHO).
WHO names who answers: an agent's id, \"you\", the viewpoints.
Each eval binds its own; `amacs--agent-call' notes them.")

(defvar amacs--eval-wait nil
  "While an eval runs, the wait it registered with `agent-wait-for', or nil.
A plist (:talk-ids IDS :timeout SECONDS), as the server accepted it:
after the eval the agent sleeps until replies to IDS arrive.  Each
eval binds its own; `amacs-eval-done-functions' still see it.")

(defconst amacs-eval-stopped "quit: the eval was stopped (C-g)"
  "The error of an eval the person stopped with \\[keyboard-quit].")

(defun amacs--print-result (value)
  "Return VALUE printed for the agent, without text properties, size-capped."
  (let* ((print-length nil) (print-level nil)
         (text (prin1-to-string (if (stringp value) (substring-no-properties value) value))))
    (if (> (length text) amacs-eval-result-max-chars)
        (format "%s... [cut: %d of %d chars shown]"
                (substring text 0 amacs-eval-result-max-chars)
                amacs-eval-result-max-chars (length text))
      text)))

;;;; The files an eval reads and writes

(defvar amacs--eval-files nil
  "While an eval runs, (READ . WRITTEN): the files it read and wrote.
Newest first, absolute, each once; nil outside an eval.  Each eval
binds its own, so an eval run inside another one (from a process
filter) notes its files for itself.")

(defun amacs--eval-note (kind file)
  "Note FILE, expanded, as KIND (`read' or `written') for the running eval."
  (when (and amacs--eval-files (stringp file))
    (let ((path (expand-file-name file)))
      (if (eq kind 'read)
          (unless (member path (car amacs--eval-files))
            (push path (car amacs--eval-files)))
        (unless (member path (cdr amacs--eval-files))
          (push path (cdr amacs--eval-files)))))))

(defcustom amacs-read-before-write nil
  "Whether an agent may write only the files it has read as they are now.
nil (the default): no check.  t: before an agent's eval writes a file
that exists, the file's content on disk is compared (SHA-256) with
what that agent last read or wrote of it; a file it never read, or
that changed since, is not written and the eval gets an error naming
it.  A new file may be written, copied, renamed or linked to; copying,
renaming, linking or deleting onto a file that exists is checked as
writing it.  Each agent knows only its own reads: a subagent starts
knowing none.  The check is made in the same call as the write, so
nothing can change the file in between.  Once the server has been told
it is on, it stays on until the server is restarted (\[amacs-restart]):
an agent's eval that sets this variable does not switch it off."
  :type 'boolean
  :group 'amacs)

(defvar amacs--eval-guards nil
  "The running evals' guards, innermost first: plists (:agent :guard :known).
Each is made as its eval starts, from the agent the server sent the
eval for, `amacs-read-before-write' then and the files known to the
agents of its connection's server (K, its `amacs-life-known-files':
per agent id, a table of file name -> SHA-256 of its content as the
agent last read or wrote it), and is what the file handler checks:
binding or setting either during the eval changes neither whose record
is used nor whether the guard is on.  Two homes' agents of one id know
each their own files.")

(defun amacs--eval-guard (key)
  "KEY (:agent, :guard or :known) of the innermost running eval's guard."
  (plist-get (car amacs--eval-guards) key))

(defun amacs--file-digest (file)
  "SHA-256 of FILE's bytes on disk, or nil if it cannot be read.
Read past the eval's own file name handler."
  (let ((inhibit-file-name-handlers (cons #'amacs--eval-file-handler inhibit-file-name-handlers))
        (inhibit-file-name-operation 'insert-file-contents))
    (condition-case nil
        (with-temp-buffer
          (set-buffer-multibyte nil)
          (insert-file-contents-literally file)
          (secure-hash 'sha256 (current-buffer)))
      (file-error nil))))

(defun amacs--known (file)
  "Note FILE's content on disk now as known to the running agent."
  (when (amacs--eval-guard :guard)
    (let* ((agent (amacs--eval-guard :agent))
           (known (amacs--eval-guard :known))
           (table (or (gethash agent known)
                      (puthash agent (make-hash-table :test #'equal) known)))
           (path (expand-file-name file)))
      (puthash path (amacs--file-digest path) table))))

(defun amacs--check-write (file &optional verb)
  "Signal an error if the running agent may not write FILE.
VERB says how it would (write, the default; copy onto, rename, delete).
The rule is `amacs-read-before-write', as it was when the eval began."
  (let ((path (expand-file-name file))
        (agent (amacs--eval-guard :agent)))
    (when (and (amacs--eval-guard :guard) (file-exists-p path))
      (let* ((table (gethash agent (amacs--eval-guard :known)))
             (known (if table (gethash path table 'never) 'never)))
        (unless (equal known (amacs--file-digest path))
          (error "Read before write: %s %s; read it, then %s it" path
                 (if (eq known 'never)
                     (format "was never read by %s" agent)
                   "changed on disk since you read it")
                 (or verb "write")))))))

(defun amacs--check-file-operation (operation args)
  "Check the file OPERATION with ARGS may be done by the running agent.
Every primitive that writes, copies onto, renames or deletes a file is
checked on each file it would change."
  (when amacs--eval-guards
    (pcase operation
      ('write-region (when (and (stringp (nth 2 args)) (not (amacs--auto-save-p (nth 2 args))))
                       (amacs--check-write (nth 2 args))))
      ('copy-file (amacs--check-write (nth 1 args) "copy onto"))
      ('rename-file (amacs--check-write (nth 0 args) "rename")
                    (amacs--check-write (nth 1 args) "rename onto"))
      ((or 'make-symbolic-link 'add-name-to-file) (amacs--check-write (nth 1 args) "link onto"))
      ('delete-file (amacs--check-write (nth 0 args) "delete")))))

(defvar amacs-eval-file-change-functions nil
  "Functions called before an agent's eval changes a file on disk.
Each gets the file operation's name (`write-region', `copy-file',
`rename-file', `delete-file', `make-symbolic-link', `add-name-to-file')
and its arguments, once the operation is allowed and before it is done.
Called from the eval's file name handler, which sees the primitives'
calls from compiled code too, with no primitive advised: advising one
compiles a trampoline (about a second, at the first eval of a session).")

(defun amacs--eval-file-handler (operation &rest args)
  "Do file OPERATION on ARGS as usual; note its file for the running eval.
In `file-name-handler-alist' only while an agent's eval runs.  Its
`operations' property limits it to `insert-file-contents' (a read)
and the primitives that write, copy, rename, link or delete a file:
other file operations never reach it.
A library being loaded and an auto-save file are not the agent's
reading and writing, and are not noted.  With `amacs-read-before-write',
a write is checked first and may be refused (an error, nothing written);
under `amacs-eval-confirm' `writes' the person is asked next."
  (amacs--check-file-operation operation args)
  (unless (eq operation 'insert-file-contents)
    (amacs--eval-ask-leave operation args)
    (run-hook-with-args 'amacs-eval-file-change-functions operation args))
  (prog1 (let ((inhibit-file-name-handlers
                 (cons #'amacs--eval-file-handler
                       (and (eq inhibit-file-name-operation operation)
                            inhibit-file-name-handlers)))
                (inhibit-file-name-operation operation))
           (apply operation args))
    (pcase operation
      ('insert-file-contents
       (unless load-in-progress
         (amacs--eval-note 'read (car args))
         (when (and amacs--eval-files (stringp (car args)) (null (nth 2 args)) (null (nth 3 args)))
           (amacs--known (car args))))) ; the whole file: the agent has seen it all
      ('write-region
       (let ((file (nth 2 args)))
         (unless (amacs--auto-save-p file)
           (amacs--eval-note 'written file)
           (when (and amacs--eval-files (stringp file))
             (amacs--known file)))))
      ((or 'copy-file 'rename-file 'make-symbolic-link 'add-name-to-file)
       (amacs--eval-note 'written (nth 1 args))
       (when (eq operation 'rename-file) (amacs--eval-note 'written (nth 0 args)))
       (when (stringp (nth 1 args)) (amacs--known (nth 1 args))))
      ('delete-file (amacs--eval-note 'written (nth 0 args))))))

(defun amacs--auto-save-p (file)
  "Whether FILE is the current buffer's auto-save file (not the agent's writing)."
  (and buffer-auto-save-file-name (stringp file)
       (string= (expand-file-name file) (expand-file-name buffer-auto-save-file-name))))

(defun amacs--emacs-own-file-p (file)
  "Return non-nil when Emacs writes FILE for itself: not the agent's writing.
An auto-save file, a backup, or a native compiler's temporary file (a
library loaded during an eval is compiled in the background, and its
job written to a file, in a fresh HOME)."
  (and (stringp file)
       (or (amacs--auto-save-p file)
           (backup-file-name-p file)
           (string-match-p "\\`emacs-\\(?:async\\|int\\)-comp-" (file-name-nondirectory file)))))

(put 'amacs--eval-file-handler 'operations
     '(insert-file-contents write-region copy-file rename-file delete-file make-symbolic-link
       add-name-to-file))

(defun amacs--eval-note-visit (value)
  "Note as read the files of the buffers in VALUE.
VALUE is what `find-file-noselect' returned.  A buffer that visits
its file already is read without `insert-file-contents'; a new file,
not on disk yet, is not read."
  (dolist (buffer (if (listp value) value (list value)))
    (let ((file (and (bufferp buffer) (buffer-file-name buffer))))
      (when (and file amacs--eval-files
                 (not (member (expand-file-name file) (car amacs--eval-files)))
                 (file-exists-p file))
        (amacs--eval-note 'read file))
      ;; A buffer that still matches its file shows the agent what is on disk.
      (when (and file amacs--eval-files (file-exists-p file)
                 (with-current-buffer buffer (and (not (buffer-modified-p)) (verify-visited-file-modtime))))
        (amacs--known file))))
  value)

(defun amacs--eval-noting-files (thunk)
  "Call THUNK and return its value, noting the files it read and wrote.
They go into `amacs--eval-files'.  The file name handler and the
advice are there for this call only: they go when THUNK returns,
signals or quits.  The
handler's regexp matches at the end of every file name, the latest
place any handler can match, so it comes before jka-compr's or Tramp's
and hands the operation on to them."
  (let ((entry (cons "\\'" #'amacs--eval-file-handler))
        (advised (not (advice-member-p #'amacs--eval-note-visit #'find-file-noselect)))
        (guard (list :agent amacs-current-agent :guard amacs-read-before-write
                     :known (amacs-life-known-files (amacs-connection-life (amacs-current-connection))))))
    (push guard amacs--eval-guards)
    (push entry file-name-handler-alist)
    (when advised
      (advice-add #'find-file-noselect :filter-return #'amacs--eval-note-visit))
    (unwind-protect
        (funcall thunk)
      (let ((inhibit-quit t))
        ;; `delq', not a `let' binding: handlers the eval added (loading Tramp) stay.
        (setq file-name-handler-alist (delq entry file-name-handler-alist)
              amacs--eval-guards (delq guard amacs--eval-guards))
        (when advised
          (advice-remove #'find-file-noselect #'amacs--eval-note-visit))))))

(defun amacs--eval-with-files (outcome files)
  "OUTCOME with :files-read and :files-written from FILES, (READ . WRITTEN).
Each key is there only when it has files, oldest first."
  (append outcome
          (and (car files) (list :files-read (reverse (car files))))
          (and (cdr files) (list :files-written (reverse (cdr files))))))

;;;; Evaluating

(defun amacs--eval-form (text)
  "Read and evaluate TEXT; return a plist (:success :result :error).
Never signals: reader errors, signals and quits (the server's time
limit or \\[keyboard-quit]) all come back as :error.  The files the
eval read and wrote, if any, are in :files-read and :files-written
\(absolute names, each once)."
  (let ((debugger #'amacs--eval-ignore-debugger)
        (debug-on-quit nil)
        (debug-on-error nil)
        (debug-on-event 'sigusr1)
        (before (buffer-list))
        (started (float-time))
        (displayed nil)
        (amacs--eval-files (cons nil nil))
        outcome)
    (condition-case err
        (let ((form (amacs--read-forms text)))
          (setq outcome
                (list :success t
                      :result (amacs--print-result
                               (let ((inhibit-quit nil))
                                 (save-window-excursion ; the agent does not rearrange your windows
                                   (prog1 (save-current-buffer
                                            (amacs--eval-noting-files (lambda () (eval form t))))
                                     (setq displayed (mapcar #'window-buffer (window-list))))))))))
      (amacs-unreadable
       (setq outcome (list :success nil :error (format "Unreadable elisp: %s" (cadr err)))))
      (quit
       (setq outcome
             (list :success nil
                   :error (if (>= (- (float-time) started) amacs-eval-timeout)
                              (format "quit: the eval was stopped at the time limit (amacs-eval-timeout, %s s)"
                                      amacs-eval-timeout)
                            amacs-eval-stopped))))
      (error
       (setq outcome (list :success nil :error (amacs-error-message err)))))
    (setq debug-on-next-call nil)
    (amacs--show-agent-buffers
     (let ((shown (mapcar #'window-buffer (window-list))))
       (delete-dups (append (cl-remove-if (lambda (b) (memq b shown)) displayed)
                            (cl-remove-if (lambda (b) (memq b before)) (buffer-list))
                            nil))))
    (amacs--eval-with-files outcome amacs--eval-files)))

(defcustom amacs-eval-confirm nil
  "Whether you approve the agent's evals, or what they do, before it happens.
nil: never ask.  `writes': ask, while an eval runs, before it writes,
copies, renames or deletes a file or starts a process (each file or
program once per eval); reading, computing and editing buffers go on
unasked, and what the evals changed is listed after the turn (the
\"▸ changed\" line, whose diff can be undone).  A declined write or
process is an error in the eval, which the agent sees.  t: ask y/n
before every eval.  A function: called with the form (a string) and
the agent's id; when it returns non-nil, you are asked about the eval.
A declined eval reaches the agent as an error result, \"the person
declined this eval\".  While you decide, the eval's time limit does not
run; each decision is in the eval's result, so the transcript has it."
  :type '(choice (const :tag "Never ask" nil)
                 (const :tag "Ask before file writes and processes" writes)
                 (const :tag "Ask before every eval" t)
                 (function :tag "Ask when this returns non-nil"))
  :group 'amacs)

(defconst amacs-eval-declined "the person declined this eval"
  "The error a declined eval reports to the agent.")

(defvar amacs-eval-start-functions nil
  "Functions called with the eval event before the agent's form runs.")

(defvar amacs-eval-done-functions nil
  "Functions called with the eval event and its result plist after it ran.")

(defun amacs--eval-needs-confirm-p (form agent)
  "Return non-nil when `amacs-eval-confirm' asks about FORM from AGENT.
With `writes' it asks about what the eval does, not the eval."
  (cond ((eq amacs-eval-confirm 'writes) nil)
        ((functionp amacs-eval-confirm) (funcall amacs-eval-confirm form agent))
        (t amacs-eval-confirm)))

(defvar amacs--eval-decisions nil
  "The person's decisions about the running eval, newest first.
Each a plist (:action ACTION :target TARGET :allowed FLAG); sent in the
eval's result as :decisions, so the transcript records them.")

(defun amacs--eval-decide (action target allowed)
  "Record the person's decision ALLOWED on ACTION of TARGET; return ALLOWED."
  (push (list :action action :target target :allowed (if allowed t :false)) amacs--eval-decisions)
  allowed)

(defun amacs--eval-guarded-action (function args)
  "The (ACTION TARGET) that FUNCTION called with ARGS would do, or nil.
For `amacs-eval-confirm' `writes': a file written, copied, renamed,
linked to or deleted, or a program started.  An auto-save file is not
the agent's."
  (pcase function
    ('write-region (let ((file (nth 2 args)))
                     (and (stringp file) (not (amacs--emacs-own-file-p file))
                          (list "write" (abbreviate-file-name (expand-file-name file))))))
    ('delete-file (and (not (amacs--emacs-own-file-p (car args)))
                       (list "delete" (abbreviate-file-name (expand-file-name (car args))))))
    ((or 'rename-file 'copy-file 'make-symbolic-link 'add-name-to-file)
     (and (stringp (cadr args)) (not (amacs--emacs-own-file-p (cadr args)))
          (list (pcase function ('rename-file "rename to") ('copy-file "copy to") (_ "link to"))
                (abbreviate-file-name (expand-file-name (cadr args))))))
    ;; The native compiler's own workers (a library loaded in the eval) are not the agent's.
    ('make-process (and (not (string-prefix-p "Compiling" (format "%s" (plist-get args :name))))
                        (list "run" (format "%s" (car (plist-get args :command))))))
    ('call-process (list "run" (format "%s" (car args))))
    ('call-process-region (list "run" (format "%s" (nth 2 args))))))

(defun amacs--eval-ask-leave (name args)
  "Ask the person's leave for what NAME called with ARGS would do, if needed.
Under `amacs-eval-confirm' `writes', while an agent's eval runs: asks
once per eval and action, the eval's time limit waiting; a refusal
signals an error in the eval, and nothing is done."
  (let* ((action (and amacs--eval-guarding amacs-current-eval (amacs--eval-guarded-action name args)))
         (known (and action (cl-find-if (lambda (d) (and (equal (plist-get d :action) (car action))
                                                         (equal (plist-get d :target) (cadr action))))
                                        amacs--eval-decisions))))
    (unless (or (null action)
                (if known (eq (plist-get known :allowed) t)
                  (amacs--eval-decide (car action) (cadr action) (amacs--eval-ask-now action))))
      (error "The person declined to let this eval %s %s" (car action) (cadr action)))))

(defun amacs--eval-ask-now (action)
  "Ask the person whether the running eval may do ACTION, (VERB TARGET).
The eval's time limit waits while they decide."
  (let ((id amacs-current-eval)
        (amacs-eval-asking t)
        (inhibit-quit nil))
    (when (amacs-live-p) (amacs-call 'eval_hold (list id t)))
    (force-mode-line-update t)
    (unwind-protect
        (condition-case nil
            (y-or-n-p (format "AMACS: %s's eval wants to %s %s.  Allow it? "
                              amacs-current-agent (car action) (cadr action)))
          (quit nil))
      (when (amacs-live-p) (amacs-call 'eval_hold (list id nil))))))

(defconst amacs--eval-guarded-processes '(make-process call-process call-process-region)
  "The process starts `amacs-eval-confirm' `writes' asks about, by advice.
A file's write, copy, rename, link or delete is asked about in the
eval's file name handler, which advises nothing; a process start
reaches no file name handler, so these three are advised.")

(defvar amacs--eval-guarding nil
  "Non-nil while an agent's eval runs under `amacs-eval-confirm' `writes'.")

(defun amacs--eval-install-asking ()
  "Advise `make-process', `call-process' and its region variant, once; keep it.
Done before the first eval under `writes' runs, never inside one: a
natively compiled Emacs compiles a trampoline for each primitive it
advises (seconds, and files written), and without one the advice misses
the calls from compiled code.  Outside an agent's eval under `writes'
the advice only calls through."
  (dolist (name amacs--eval-guarded-processes)
    (unless (advice-member-p 'amacs-eval-ask name)
      (advice-add name :around (lambda (function &rest args)
                                 (amacs--eval-ask-leave name args)
                                 (apply function args))
                  '((name . amacs-eval-ask))))))

(defun amacs--eval-asking-about-writes (thunk)
  "Call THUNK, asking before its writes and processes under the setting `writes'.
That is `amacs-eval-confirm'."
  (let ((amacs--eval-guarding (eq amacs-eval-confirm 'writes)))
    (funcall thunk)))

(defvar amacs-eval-asking nil
  "Non-nil while the person is asked whether an eval may run.
The shell's header says so, not that the eval runs.")

(defun amacs--eval-approved-p (event)
  "Ask the person whether the eval in EVENT may run; the time limit waits."
  (let ((id (plist-get event :id))
        (form (plist-get event :form))
        (amacs-eval-asking t))
    (when (amacs-live-p) (amacs-call 'eval_hold (list id t)))
    (force-mode-line-update t)
    (unwind-protect
        (condition-case nil
            (y-or-n-p (format "AMACS: %s wants to eval %s  Run it? "
                              (or (plist-get event :agent) "primary")
                              (truncate-string-to-width
                               (replace-regexp-in-string "[ \t\n]+" " " form) 200 nil nil "…")))
          (quit nil))
      (when (amacs-live-p) (amacs-call 'eval_hold (list id nil))))))

(defun amacs--eval-keeping-settings (thunk)
  "Call THUNK, an agent's eval, and put back the person's settings it changed.
Each of `amacs--setting-variables' is as it was before, however the
eval set it, and the settings it set are sent now, as the eval's: the
server refuses them (a `control_refused' event naming the agent, a line
in the eval's result).  Left set, they would reach the server with the
person's next input, as the person's (`amacs--send-changed-settings')."
  (let ((before (mapcar #'default-value amacs--setting-variables)))
    (unwind-protect (funcall thunk)
      (unless (equal before (mapcar #'default-value amacs--setting-variables))
        (let ((tried (amacs--settings)))
          (let ((values before))
            (dolist (variable amacs--setting-variables)
              (set-default variable (pop values))))
          (when (amacs-live-p) (amacs-call 'settings (list tried))))))))

(defun amacs--handle-eval-event (event)
  "Evaluate the form in EVENT for its agent and send the result to the server.
Asks first when `amacs-eval-confirm' says so; tells the shell before and after."
  (let* ((agent (or (plist-get event :agent) "primary"))
         (form (plist-get event :form))
         (amacs--eval-talks nil)        ; this eval's own, for the done functions too
         (amacs--eval-wait nil)
         (amacs--eval-decisions nil)
         (result nil))
    (when (eq amacs-eval-confirm 'writes) (amacs--eval-install-asking))
    (run-hook-with-args 'amacs-eval-start-functions event)
    (setq result
          (if (and (amacs--eval-needs-confirm-p form agent)
                   (not (amacs--eval-decide "eval" nil (amacs--eval-approved-p event))))
              (list :success nil :error amacs-eval-declined)
            (let ((amacs-current-agent agent)
                  (amacs-current-eval (plist-get event :id))
                  ;; On when the person's setting, as the server holds it, says so: an
                  ;; earlier eval that set the variable to nil did not switch the guard off.
                  (amacs-read-before-write (or (eq (plist-get event :guard) t) amacs-read-before-write)))
              ;; Before the form: every call the server reads from here on, until this
              ;; eval's result, was sent while it ran (docs/ARCHITECTURE.md, Trust).
              (when (amacs-live-p) (amacs-call 'eval_started (list amacs-current-eval)))
              (amacs--eval-keeping-settings
               (lambda () (amacs--eval-asking-about-writes (lambda () (amacs--eval-form form))))))))
    (when amacs--eval-decisions
      (setq result (append result (list :decisions (reverse amacs--eval-decisions)))))
    (run-hook-with-args 'amacs-eval-done-functions event result)
    (when (amacs-live-p)
      (amacs-call 'emacs_reply (list (plist-get event :id) result)))))

(amacs-on-event "eval" #'amacs--handle-eval-event)

(provide 'amacs-eval)
;;; amacs-eval.el ends here
