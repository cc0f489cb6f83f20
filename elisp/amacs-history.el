;;; amacs-history.el --- Rewind the agent's mind to a past input, or fork it  -*- lexical-binding: t; -*-

;; This file is part of AMACS.

;;; Commentary:

;; Every tick of the agent is restorable (the server's persistence/history.py).
;; `amacs-rewind' picks one of your past inputs and, once you confirm, returns
;; the mind to just before it: a turn at work is interrupted first, the server
;; restores the home in place, and the shell shows the conversation up to there.
;; The future it leaves is never deleted: it stays on a git ref whose name the
;; shell and agent-chat.org give.  `amacs-fork' makes a new AMACS home holding
;; the mind at a past input, to open a second shell on.

;;; Code:

(require 'amacs-transport)
(require 'iso8601)
(require 'cl-lib)
(require 'subr-x)

(declare-function amacs-shell--output "amacs-shell")
(declare-function amacs-shell--past-input "amacs-shell-output")
(declare-function amacs-shell--buffer "amacs-shell")
(declare-function amacs-shell--resume "amacs-shell" (&optional said))
(declare-function amacs-shell--reread-history "amacs-shell-input")
(declare-function amacs-shell--draft "amacs-shell-input")
(declare-function amacs-shell--put-at-prompt "amacs-shell-input" (text))
(declare-function amacs-shell--draft-rewound "amacs-shell-input")
(declare-function amacs-shell-open "amacs-shell-start")
(declare-function amacs-changes-fork "amacs-changes")
(declare-function amacs-when-ready "amacs-server")
(defvar amacs-shell--resumed)
(defvar amacs--status)

;; Each past input is offered as its first words, one line of this width at most.
(defconst amacs-history--label-width 70
  "The width of a past input's label in the picker.")

(defun amacs-history--label (text)
  "Return TEXT, a past input, as the picker labels it: one line, cut to width."
  (if (and (<= (string-width text) amacs-history--label-width) (not (string-search "\n" text)))
      text                              ; most inputs: 5,000 labels took Emacs ~0.25 s without this
    (truncate-string-to-width (replace-regexp-in-string "\n" " " text)
                              amacs-history--label-width nil nil "…")))

(defun amacs-history--when (timestamp &optional seconds)
  "Return TIMESTAMP, ISO 8601 as in the chat log, as Nov 27 14:02.
SECONDS: with them, as Nov 27 14:02:05."
  (or (ignore-errors (format-time-string (if seconds "%b %-d %H:%M:%S" "%b %-d %H:%M")
                                         (encode-time (iso8601-parse timestamp))))
      (format "%s" timestamp)))

(defun amacs-history--which (time rank count)
  "Which of COUNT inputs of the same words one is: typed at TIME, RANK newest.
RANK 1 is the newest.  Said in the question and the shell's line: the
picker's two labels alone do not say which one was picked."
  (format "the one typed %s, the %s of %d" (amacs-history--when time t)
          (cond ((= rank 1) "newest") ((= rank count) "oldest")
                (t (format "%d%s newest" rank (pcase rank (2 "nd") (3 "rd") (_ "th")))))
          count))

(defun amacs-history--page (&optional before)
  "A page of the home's past inputs, newest first, as (ENTRIES . MORE).
Each entry is (LABEL TICK TEXT WHICH): the picker's label, the input's
tick, its text, and, for words typed more than once in the page, which
of them it is (`amacs-history--which'; else nil).  BEFORE: only those
before that tick.  MORE: older ones are left.  The server reads them
from the chat log's end, its earlier months as far as the page takes.
Each copy of an input typed more than once is labelled with when it was typed."
  (let* ((listed (amacs--call-sync 'past_inputs (and before (list before))))
         (texts (append (plist-get listed :texts) nil))
         (times (append (plist-get listed :times) nil))
         (seen (make-hash-table :test #'equal))
         (alike (make-hash-table :test #'equal)) ; text -> how many of the page have it
         (minutes (make-hash-table :test #'equal)) ; label -> the minutes its copies were typed in
         entries)
    (cl-mapc (lambda (text time)
               (when (stringp text)
                 (push (amacs-history--when time) (gethash (amacs-history--label text) minutes))))
             texts times)
    (dolist (tick (append (plist-get listed :ticks) nil))
      (let ((text (pop texts))
            (time (pop times)))
        (when (and (stringp text) (integerp tick))
          (let* ((base (amacs-history--label text))
                 (label base)
                 (typed (gethash label minutes))
                 (n 1))
            (when (cdr typed)
              ;; Every copy says when, the newest too; one typed in the minute of another
              ;; says its second: the minute alone does not tell them apart.
              (setq base (format "%s  (typed %s)" base
                                 (amacs-history--when
                                  time (< 1 (cl-count (amacs-history--when time) typed :test #'equal))))
                    label base))
            (while (gethash label seen)
              (setq n (1+ n)
                    label (format "%s #%d" base n)))
            (puthash label t seen)
            (puthash text (1+ (gethash text alike 0)) alike)
            (push (list label tick text (gethash text alike) time) entries)))))
    (cons (mapcar (lambda (entry)       ; (LABEL TICK TEXT RANK TIME) -> (LABEL TICK TEXT WHICH)
                    (let ((count (gethash (nth 2 entry) alike)))
                      (list (nth 0 entry) (nth 1 entry) (nth 2 entry)
                            (and (> count 1) (amacs-history--which (nth 4 entry) (nth 3 entry) count)))))
                  (nreverse entries))
          (plist-get listed :more))))

(defun amacs-history--at-point (entries)
  "The label in ENTRIES of the past input point is on in the shell, or nil.
At the prompt, the input there when it is a past one (RET on a past
input puts it there).  The newest of that text when several are."
  (let ((said (and (derived-mode-p 'amacs-shell-mode) (fboundp 'amacs-shell--past-input)
                   (or (amacs-shell--past-input (point))
                       (let ((process (get-buffer-process (current-buffer))))
                         (and process (>= (point) (process-mark process))
                              (string-trim (buffer-substring-no-properties (process-mark process)
                                                                           (point-max)))))))))
    (and (stringp said) (not (string-empty-p said))
         (car (cl-find-if (lambda (entry) (equal (amacs-history--label (nth 2 entry))
                                                 (amacs-history--label said)))
                          entries)))))

(defun amacs-history--plain-completion-p ()
  "Whether the minibuffer completes as in Emacs -Q: no UI lists the choices."
  (and (eq completing-read-function #'completing-read-default)
       (not (cl-some (lambda (mode) (and (boundp mode) (symbol-value mode)))
                     '(icomplete-mode fido-mode vertico-mode mct-mode selectrum-mode ivy-mode helm-mode)))))

(defun amacs-history--complete (prompt labels default &optional which)
  "Read one of LABELS, newest first as given, with PROMPT and DEFAULT.
WHICH, such as your last input, says which one the default is, after it
in the prompt.  The order is kept in every completion UI; where none
lists the choices, they are listed at once (not only after a TAB), and
the *Completions* window that showed them is gone once one is chosen."
  (let ((shown (get-buffer-window "*Completions*" 0))
        (table (lambda (string pred action)
                 (if (eq action 'metadata)
                     '(metadata (display-sort-function . identity) (cycle-sort-function . identity))
                   (complete-with-action action labels string pred)))))
    (unwind-protect
        (minibuffer-with-setup-hook
            (lambda () (when (amacs-history--plain-completion-p) (minibuffer-completion-help)))
          (completing-read (format-prompt prompt (concat (truncate-string-to-width default 40 nil nil "…")
                                                         (and which (concat ", " which))))
                           table nil t nil nil default))
      (let ((window (get-buffer-window "*Completions*" 0)))
        (when (and window (not (eq window shown)))
          (quit-window nil window))))))

(defconst amacs-history--older "… older inputs"
  "The last choice of a picker's page when older inputs are left.")

(defun amacs-history--pick (prompt &optional first)
  "Read one of the home's past inputs with PROMPT, a page at a time.
Return its entry (LABEL TICK TEXT WHICH) (`amacs-history--page'), or FIRST
when FIRST, a label offered before the inputs and the default, is
chosen.  Else the default is the input point is on in the shell, or the
newest.  A page ends with `amacs-history--older' when older inputs are
left; choosing it shows them."
  (let (before chosen)
    (while (not chosen)
      (let* ((page (amacs-history--page before))
             (entries (car page))
             (first (and (not before) first))
             (labels (append (and first (list first)) (mapcar #'car entries)
                             (and (cdr page) (list amacs-history--older)))))
        (unless labels
          (user-error "No past input yet"))
        (let* ((at-point (and (not first) (amacs-history--at-point entries)))
               (label (amacs-history--complete
                       prompt labels (or first at-point (car labels))
                       (cond (first nil)
                             (at-point "the input at point")
                             ((not before) "your last input")))))
          (cond ((equal label amacs-history--older) (setq before (nth 1 (car (last entries)))))
                ((and first (equal label first)) (setq chosen first))
                (t (setq chosen (assoc label entries)))))))
    chosen))

(defun amacs-history--quoted (text &optional which)
  "TEXT, a past input, quoted for a line or a question: «its first words».
WHICH, when the same words were typed more than once, follows in
parentheses (`amacs-history--page')."
  (concat "«" (truncate-string-to-width (amacs-history--label text) 40 nil nil "…") "»"
          (and which (format " (%s)" which))))

(defun amacs-history--read-input (verb)
  "Ask which past input to VERB back to before; return (TICK TEXT WHICH).
TICK is the tick that ends just before that input, TEXT the input, WHICH
says which one it is when the same words were typed more than once (else
nil).  The newest inputs are offered first, older ones on asking.  The
input point is on in the shell is the default, else the newest."
  (let* ((entry (amacs-history--pick (format "%s%s to before you typed" (upcase (substring verb 0 1)) (substring verb 1))))
         (tick (1- (nth 1 entry))))
    (when (< tick 1)
      (user-error "That is your first input: before it the mind was new, as a new home's is \
\(AMACS_HOME=NEW ./amacs starts one)"))
    (list tick (nth 2 entry) (nth 3 entry))))

(defconst amacs-history--abandoned-divider
  ";; ──────── above: the abandoned future ────────"
  "The line a rewind draws under the shell's conversation it abandoned.")

;;;###autoload
(defun amacs-rewind (tick &optional said which)
  "Return the agent's mind to the end of TICK: just before the input after it.
Interactively, pick one of your past inputs and confirm: the mind goes
back to before you typed it (SAID, named in the shell; WHICH says which
one when the same words were typed more than once).  A turn at work is
interrupted first.  The abandoned future stays on a git ref, named in
the shell and in agent-chat.org."
  (interactive
   (let ((picked (amacs-history--read-input "go back")))
     (unless (yes-or-no-p (format "What came after it is kept aside (on a git ref), and a turn at work is \
interrupted.  Go back to before you typed %s? " (amacs-history--quoted (nth 1 picked) (nth 2 picked))))
       (user-error "Not rewound"))
     picked))
  (let* ((done (amacs--call-sync 'rewind (list tick)))
         (line (plist-get done :line)))
    (setf (amacs-wire-status (amacs-connection-wire (amacs-current-connection))) (amacs--call-sync 'status nil))
    (let ((buffer (and (fboundp 'amacs-shell--buffer) (amacs-shell--buffer))))
      (when buffer
        (with-current-buffer buffer
          (amacs-shell--output amacs-history--abandoned-divider 'amacs-shell-status)
          (when said
            (amacs-shell--output (format ";; Back to before you typed %s.  Buffers and files the agent changed in this Emacs stay as they are." (amacs-history--quoted said which))
                                 'amacs-shell-status))
          ;; The inputs typed after TICK left the history file (M-p) for the abandoned ref; what
          ;; is at the prompt is the present and stays, or, at an empty one, the input gone back over.
          (amacs-shell--reread-history)
          (let ((back (and said (string-blank-p (amacs-shell--draft)) said)))
            (amacs-shell--output
             (concat ";; " line "; your inputs from there on are kept with it, no longer in \
M-p (the hub lists it)" (and back (format ", and %s is back at the prompt to edit" (amacs-history--quoted back)))
                     ". The conversation up to there:")
             'amacs-shell-status)
            (setq amacs-shell--resumed nil)
            (amacs-shell--resume t)
            (when back (amacs-shell--put-at-prompt back)))
          (amacs-shell--draft-rewound)
          ;; The person asked for it: show the mind as it now is, however far up they had read.
          (goto-char (point-max))
          (dolist (window (get-buffer-window-list buffer nil t))
            (set-window-point window (point-max))))))
    (message "AMACS: %s" (if said (format "back to before you typed %s" (amacs-history--quoted said which)) line))
    done))

(defcustom amacs-fork-directory nil
  "Where `amacs-fork' proposes to make a new home.
Nil: next to the home being forked, in the folder that holds it."
  :type '(choice (const :tag "Next to the home being forked" nil) directory)
  :group 'amacs)

(defun amacs-history--fork-directory ()
  "The folder `amacs-fork' proposes a new home in: see `amacs-fork-directory'."
  (file-name-as-directory
   (or amacs-fork-directory
       (file-name-directory (directory-file-name (amacs-connection-home (amacs-current-connection)))))))

(defun amacs-history--fork-name (tick)
  "A folder name for a fork at TICK (a number, or \"now\"), new in its folder.
The folder is `amacs-history--fork-directory'.  Named after the current
connection's home: agent-fork-tick-3 (or agent-fork-now) for ~/.agent."
  (let* ((home (file-name-nondirectory (amacs-connection-home (amacs-current-connection))))
         (base (format (if (numberp tick) "%s-fork-tick-%d" "%s-fork-%s") (string-trim-left home "\\.+") tick))
         (name base)
         (n 1))
    (while (file-exists-p (expand-file-name name (amacs-history--fork-directory)))
      (setq n (1+ n)
            name (format "%s-%d" base n)))
    name))

(defconst amacs-history--now "now: the mind as it is"
  "The label `amacs-fork' offers first: the fork holds the mind at its last tick.")

(defun amacs-history--read-fork-tick ()
  "Ask where to fork: now (the default), or before one of the past inputs.
Return (TICK TEXT WHICH): the tick that ends there, or \"now\", the
input it ends before (nil for now) and which one it is when the same
words were typed more than once (`amacs-history--read-input')."
  (let ((picked (amacs-history--pick "Fork now, or from before you typed" amacs-history--now)))
    (if (equal picked amacs-history--now)
        (list "now" nil nil)
      (let ((tick (1- (nth 1 picked))))
        (when (< tick 1)
          (user-error "That is your first input: before it the mind was new, as a new home's is \
\(AMACS_HOME=NEW ./amacs starts one)"))
        (list tick (nth 2 picked) (nth 3 picked))))))

(defun amacs-history--fork-choices (parent done)
  "The choices for the server of the fork DONE (the server's answer) of PARENT.
The fork runs where its parent runs: PARENT's choices (`amacs-chosen'),
and the backend, model and base URL its server runs on; a parent running
the model itself (:local, :demo) has the fork's server run its own."
  (let ((chosen (copy-sequence (amacs-life-chosen (amacs-connection-life parent)))))
    (unless (or (plist-get chosen :local) (plist-get chosen :demo))
      (setq chosen (plist-put chosen :backend (plist-get done :backend)))
      (setq chosen (plist-put chosen :model (plist-get done :model)))
      (when (plist-get done :base-url)
        (setq chosen (plist-put chosen :base-url (plist-get done :base-url)))))
    chosen))

;;;###autoload
(defun amacs-fork (tick dest)
  "Make DEST a new AMACS home holding the agent's mind at the end of TICK.
TICK is a tick number, or \"now\": the last tick.  Interactively, pick
now (the default) or one of your past inputs (the fork ends just before
it), and a new folder.  The fork's server runs on the model, backend and
base URL this home's runs on.  With a shell per home (`amacs-shell-open'),
a second shell opens on DEST beside this home's shell."
  (interactive
   (let* ((picked (amacs-history--read-fork-tick))
          (tick (car picked)))
     (list tick (read-directory-name (if (nth 1 picked)
                                         (format "New home for the fork from before you typed %s: "
                                                 (amacs-history--quoted (nth 1 picked) (nth 2 picked)))
                                       "New home for the fork of the mind as it is: ")
                                     (amacs-history--fork-directory) nil nil
                                     (amacs-history--fork-name tick)))))
  (let* ((parent (amacs-current-connection))
         (done (amacs--call-sync 'fork (list tick (expand-file-name dest))))
         (line (plist-get done :line)))
    (setf (amacs-life-chosen (amacs-connection-life (amacs-connection-for (plist-get done :home))))
          (amacs-history--fork-choices parent done))
    (when (and (fboundp 'amacs-changes-fork) (natnump (plist-get done :tick)))
      (amacs-changes-fork parent (amacs-connection-for (plist-get done :home)) (plist-get done :tick)))
    (message "AMACS: %s" line)
    (if (fboundp 'amacs-shell-open)
        (let* ((shell (amacs-ui-shell (amacs-connection-ui parent)))
               (beside (or (and (buffer-live-p shell) (get-buffer-window shell)) (selected-window))))
          ;; Beside this home's shell, wherever the command was called from (agent-chat.org, the hub).
          (select-window (split-window beside nil 'right))
          (with-current-buffer (amacs-shell-open (plist-get done :home))
            ;; Once two homes are live every shell's header names its home: redraw them all
            ;; (the first shell's window shows nothing new that would redraw its header).
            (amacs-when-ready (lambda () (force-mode-line-update t)))))
      (message "AMACS: %s; open it with AMACS_HOME=%s (a shell per home is not in this Emacs yet)"
               line (plist-get done :home)))
    done))

(provide 'amacs-history)
;;; amacs-history.el ends here
