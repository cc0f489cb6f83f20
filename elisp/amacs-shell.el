;;; amacs-shell.el --- The *amacs-shell* comint buffer -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The person's window onto the agent (ARCHITECTURE.md, The transport): a comint
;; buffer with a dummy process, as in ielm.  RET hands the input to the
;; server and returns at once; the agent's reply appears when it comes.
;;
;; The buffer is always laid out the same way:
;;
;;   output ...            replies, eval lines, notes; grows at `amacs-shell--out'
;;   footer                one line per working subagent, then queued inputs
;;   amacs> input          the prompt (read-only) and what the person types
;;
;; Everything the agent says goes in at `amacs-shell--out', before the
;; footer, so what the person is typing is never touched: not while a
;; reply streams, not when it ends.  Input sent while the agent works is
;; shown in the footer as queued, and moves into the output when the
;; agent takes it.  A window (or point) in the input area keeps its place
;; relative to the end of the buffer, so it follows the output and ends
;; at the prompt, as in comint; one that was moved up to read stays put.
;;
;; A streamed reply is a region of its own.  When the reply is complete it
;; is replaced by its org rendering; when the turn fails, the server goes,
;; or the person interrupts, what streamed is marked as discarded.  Nothing
;; outside that region is ever deleted.

;;; Code:

(require 'cl-lib)
;; comint is loaded when the shell's mode first runs (`comint-mode' is not
;; autoloaded): `amacs-shell' starts the server before, so that Python's
;; start-up and this load (~40 ms) go on at once.
(eval-when-compile (require 'comint))
(autoload 'comint-mode "comint")
(require 'seq)
(require 'amacs-transport)
(require 'amacs-eval)
(require 'amacs-render)

(declare-function amacs-hub "amacs-hub")
(declare-function amacs-open-chat-log "amacs-hub")
(declare-function amacs-cancel-waiting "amacs-transport")
(defvar shell-dirtrackp)

(defcustom amacs-shell-prompt "amacs> "
  "Prompt of the AMACS shell."
  :type 'string
  :group 'amacs)

(defcustom amacs-shell-buffer-name "*amacs-shell*"
  "Name of the AMACS shell buffer."
  :type 'string
  :group 'amacs)

(defcustom amacs-shell-resume-exchanges 3
  "Exchanges from the chat log shown when a new shell opens (0: none)."
  :type 'integer
  :group 'amacs)

(defcustom amacs-shell-history-size 1000
  "Inputs kept in the shell's history, which persists across sessions."
  :type 'integer
  :group 'amacs)

(defcustom amacs-shell-eval-preview-chars 60
  "Most characters of an eval's form shown on its one-line summary.
The summary never gets wider than the shell's window."
  :type 'integer
  :group 'amacs)

(defun amacs-shell--width ()
  "Columns available in the shell's window (80 without one)."
  (let ((window (get-buffer-window (or (amacs-shell--buffer) (current-buffer)) t)))
    (max 40 (1- (if window (window-body-width window) 80)))))

(defcustom amacs-shell-agent-lines 4
  "Most working subagents shown one line each above the prompt.
The rest are counted on one more line."
  :type 'integer
  :group 'amacs)

(defface amacs-shell-annotation '((t :inherit font-lock-comment-face))
  "Face of informational notes in the AMACS shell."
  :group 'amacs)

(defface amacs-shell-warning '((t :inherit warning))
  "Face of warnings in the AMACS shell."
  :group 'amacs)

(defface amacs-shell-error '((t :inherit error))
  "Face of errors in the AMACS shell."
  :group 'amacs)

(defface amacs-shell-abandoned '((t :inherit shadow :strike-through t))
  "Face of streamed text that did not become the reply (invalid JSON, a retry)."
  :group 'amacs)

(defface amacs-shell-status '((t :inherit font-lock-comment-face :slant italic))
  "Face of one-line status notes, such as API retries."
  :group 'amacs)

(defface amacs-shell-queued '((t :inherit shadow :slant italic))
  "Face of input sent while the agent works, until the agent takes it."
  :group 'amacs)

(defface amacs-shell-eval '((t :inherit font-lock-function-name-face))
  "Face of the summary line of an eval the agent ran."
  :group 'amacs)

(defface amacs-shell-thinking '((t :inherit shadow))
  "Face of the model's thinking: its folded line and its text."
  :group 'amacs)

(defface amacs-shell-eval-error '((t :inherit error))
  "Face of the summary line of an eval that failed or was declined."
  :group 'amacs)

(defface amacs-shell-agent '((t :inherit font-lock-type-face))
  "Face of the footer lines of working subagents."
  :group 'amacs)

(defvar amacs-shell-busy nil
  "Non-nil while the agent works on a turn (or input waits for a server).
Only `amacs-shell--transition' sets it, as it moves the shell's turn.")

(defvar amacs-shell--out nil
  "Marker where output goes: the end of the output, the start of the footer.")

(defvar amacs-shell--prompt-start nil
  "Marker at the start of the prompt (the process mark is at its end).")

(defvar amacs-shell--stream-start nil
  "Marker where the reply being streamed starts, or nil.")

(defvar amacs-shell--stream-end nil
  "Marker where the reply being streamed ends, or nil.")

(defvar amacs-shell--last-reply nil
  "The text of the agent's last reply, for `amacs-shell-copy-reply'.")

(defvar amacs-shell--eval-count 0
  "Evals shown so far; names each one's invisibility symbol.")

(defvar amacs-shell--agents nil
  "The subagents at work, as the server last reported them.")

(defvar amacs-shell--stop-said nil
  "Non-nil once the shell said what a server that stopped mid-turn kept.
The next server's hello need not say it again.")

;;;; The buffer: output, footer, prompt

(defun amacs-shell--buffer ()
  "Return the live shell buffer, or nil."
  (let ((buf (get-buffer amacs-shell-buffer-name)))
    (and (buffer-live-p buf)
         (with-current-buffer buf (derived-mode-p 'amacs-shell-mode))
         buf)))

(defmacro amacs-shell--editing (&rest body)
  "Run BODY in the shell buffer, keeping the person's place.
Point and every window whose point is at or after the output marker,
in the footer, prompt or input, keep their distance from the end of
the buffer; redisplay then scrolls such a window just enough to show
its point (`scroll-conservatively' is 101 in the shell), so the prompt
stays on the window's last line.
Windows and point before the marker stay where they are.  Returns
BODY's value, or nil without a shell."
  (declare (indent 0) (debug t))
  `(let ((buf (amacs-shell--buffer)))
     (when buf
       (with-current-buffer buf
         (let* ((out (marker-position amacs-shell--out))
                (follow (delq nil (mapcar (lambda (w)
                                            (and (>= (window-point w) out)
                                                 (cons w (- (point-max) (window-point w)))))
                                          (get-buffer-window-list buf nil t))))
                (tail (and (>= (point) out) (- (point-max) (point))))
                (value (let ((inhibit-read-only t))
                         (save-excursion ,@body))))
           (when tail (goto-char (- (point-max) tail)))
           (dolist (entry follow)
             (set-window-point (car entry) (- (point-max) (cdr entry))))
           value)))))

(defun amacs-shell--output-props (text)
  "TEXT marked as output: read-only, a field of its own that \\[beginning-of-line] skips.
Only the shell writes there (inside `amacs-shell--editing'): a key
typed on a reply cannot change it."
  (propertize text 'field 'output 'inhibit-line-move-field-capture t 'read-only t
              'front-sticky '(field inhibit-line-move-field-capture read-only) 'rear-nonsticky t))

(defun amacs-shell--insert-output (text)
  "Insert TEXT at the output marker (in the shell buffer, inside the edit).
A reply streaming there stays before it."
  (let ((stream amacs-shell--stream-end))
    (when stream (set-marker-insertion-type stream nil))
    (goto-char amacs-shell--out)
    (insert (amacs-shell--output-props text))
    (when stream (set-marker-insertion-type stream t))))

(defun amacs-shell--fresh-line (&optional blank)
  "Make the output end with a newline; with BLANK, with an empty line."
  (let ((pos (marker-position amacs-shell--out)))
    (unless (<= pos (point-min))
      (unless (eq (char-before pos) ?\n) (amacs-shell--insert-output "\n"))
      (when (and blank (> (1- amacs-shell--out) (point-min))
                 (not (eq (char-before (1- amacs-shell--out)) ?\n)))
        (amacs-shell--insert-output "\n")))))

(defun amacs-shell--output (text &optional face blank)
  "Show TEXT (in FACE) on lines of its own in the output.
With BLANK, set it off by an empty line.  A `;;' note wider than the
window shows `;;' on its wrapped part too (`wrap-prefix': the text
itself is unchanged)."
  (amacs-shell--editing
    (amacs-shell--fresh-line blank)
    (amacs-shell--insert-output
     (let ((text (if (string-suffix-p "\n" text) text (concat text "\n"))))
       (when (string-prefix-p ";;" text)
         (setq text (propertize text 'wrap-prefix (propertize ";; " 'face (or face 'amacs-shell-annotation)))))
       (if face (propertize text 'font-lock-face face) text)))))

(defun amacs-shell--comment-lines (text)
  "TEXT with `;; ' before each of its lines."
  (mapconcat (lambda (line) (concat ";; " line)) (split-string text "\n") "\n"))

(defun amacs-shell--note (text)
  "Show TEXT as a note in the shell, or in the echo area without a shell.
Each of its lines is a `;;' line."
  (if (amacs-shell--buffer)
      (amacs-shell--output (amacs-shell--comment-lines text) 'amacs-shell-annotation)
    (message "%s" text)))

(defun amacs-shell--insert-prompt ()
  "Put a fresh prompt at the end of the buffer; the process mark after it."
  (let ((start (point-max)))
    (amacs-shell--insert-footer
     start (propertize amacs-shell-prompt
                       'font-lock-face 'comint-highlight-prompt 'amacs-prompt t
                       'field 'output 'inhibit-line-move-field-capture t
                       'read-only t 'front-sticky '(read-only field) 'rear-nonsticky t))
    (set-marker amacs-shell--prompt-start start))
  (set-marker (process-mark (get-buffer-process (current-buffer))) (point-max)))

(defun amacs-shell--insert-footer (pos text)
  "Insert TEXT at POS in the footer; the output and stream stay before it."
  (let ((out (marker-position amacs-shell--out))
        (stream (and amacs-shell--stream-end (marker-position amacs-shell--stream-end))))
    (goto-char pos)
    (insert text)
    (set-marker amacs-shell--out out)
    (when stream (set-marker amacs-shell--stream-end stream))))

;;;; Streaming replies

(defun amacs-shell--on-reply-delta (event)
  "Show the next piece of the reply in EVENT as it streams."
  (amacs-shell--stream (plist-get event :text)))

(defun amacs-shell--stream (text)
  "Append TEXT to the reply being streamed, opening its region if needed."
  (amacs-shell--transition 'delta)
  (amacs-shell--editing
    (unless amacs-shell--stream-start
      ;; The region ends before a newline of its own, so the footer and the
      ;; prompt stay on lines of their own while the reply grows.
      (amacs-shell--fresh-line t)
      (let ((pos (marker-position amacs-shell--out)))
        (amacs-shell--insert-output "\n")
        (setq amacs-shell--stream-start (copy-marker pos nil)
              amacs-shell--stream-end (copy-marker pos t))))
    (goto-char amacs-shell--stream-end)
    (insert (amacs-shell--output-props text))))

(defun amacs-shell--stream-close ()
  "Forget the streamed region (markers detached); return (START . END) or nil."
  (when amacs-shell--stream-start
    (prog1 (cons (marker-position amacs-shell--stream-start)
                 (marker-position amacs-shell--stream-end))
      (set-marker amacs-shell--stream-start nil)
      (set-marker amacs-shell--stream-end nil)
      (setq amacs-shell--stream-start nil amacs-shell--stream-end nil))))

(defun amacs-shell--discard-stream (reason)
  "Mark the streamed text, if any, as not the reply, for REASON."
  (when (and amacs-shell--stream-start (amacs-shell--buffer))
    (amacs-shell--editing
      (let ((region (amacs-shell--stream-close)))
        (add-text-properties (car region) (cdr region)
                             '(font-lock-face amacs-shell-abandoned))))
    (amacs-shell--output (format ";; (the text above was discarded: %s)" reason)
                         'amacs-shell-annotation)))

(defun amacs-shell--on-reply-abandon (event)
  "Mark the streamed text as not the reply, for the reason in EVENT."
  (amacs-shell--discard-stream (plist-get event :reason)))

(defun amacs-shell--on-reply (event)
  "Show the reply in EVENT rendered as org, set off by blank lines.
A streamed reply's region is replaced by the rendering."
  (let* ((text (string-trim (or (plist-get event :text) "")))
         (shown (amacs-render-org text)))
    (setq amacs-shell--last-reply text)
    (amacs-shell--transition 'replied)
    (amacs-shell--editing
      (let ((region (and (plist-get event :streamed) (amacs-shell--stream-close))))
        (if region
            (progn (delete-region (car region) (cdr region))
                   (goto-char (car region))
                   (insert (amacs-shell--output-props shown)))
          (when amacs-shell--stream-start     ; a stream that this reply does not finish
            (amacs-shell--discard-stream "not the reply"))
          (amacs-shell--fresh-line t)
          (amacs-shell--insert-output shown))
        (amacs-shell--fresh-line t)))))

;;;; Thinking (the model's, folded above its reply)

(defvar-local amacs-shell--thinking nil
  "The thinking line being streamed: (ID . END), END where its text grows.")

(defvar-local amacs-shell--thinking-count 0
  "Thinking lines shown so far (each has an invisibility id of its own).")

(defun amacs-shell--on-thinking-delta (event)
  "Add the thinking text in EVENT to its folded `thinking' line.
The line opens at the first piece, before the reply; TAB or RET on it
shows the text, as on an eval line.  A piece that comes after other
output opens a new line."
  (amacs-shell--editing
    (let ((line amacs-shell--thinking))
      (unless (and line (marker-buffer (cdr line)) (= (1+ (cdr line)) amacs-shell--out))
        (let ((id (intern (format "amacs-thinking-%d" (setq amacs-shell--thinking-count
                                                             (1+ amacs-shell--thinking-count))))))
          (add-to-invisibility-spec id)
          (amacs-shell--fresh-line)
          (amacs-shell--insert-output
           (propertize "▸ thinking" 'font-lock-face 'amacs-shell-thinking 'amacs-eval id
                       'help-echo "TAB or RET: show the model's thinking"))
          (amacs-shell--insert-output (amacs-shell--eval-detail id "" 'amacs-shell-thinking))
          (setq line (cons id (copy-marker amacs-shell--out nil)))
          (amacs-shell--insert-output (propertize "\n" 'amacs-eval id))
          (set-marker-insertion-type (cdr line) t)
          (setq amacs-shell--thinking line)))
      (goto-char (cdr line))
      (insert (amacs-shell--output-props
               (propertize (plist-get event :text) 'invisible (car line) 'amacs-eval (car line)
                           'font-lock-face 'amacs-shell-thinking 'line-prefix "    " 'wrap-prefix "    "))))))

;;;; Eval lines (the agent's actions, where they happened)

(defun amacs-shell--one-line (text limit)
  "TEXT on one line, cut to LIMIT characters."
  (truncate-string-to-width (string-trim (replace-regexp-in-string "[ \t\n]+" " " text))
                            limit nil nil "…"))

(defun amacs-shell--eval-start (event)
  "Show the eval in EVENT as a summary line that `amacs-shell-toggle' expands.
The details (form, then result) are hidden from the end of the summary
to just before the line's newline, as outline folding hides a body, so
the next line shows as it would without them."
  (let ((agent (or (plist-get event :agent) "primary")))
    (amacs-shell--transition 'eval-start agent)
    (if (not (equal agent "primary"))
        (amacs-shell--agent-doing agent (concat "eval " (amacs-shell--one-line (plist-get event :form) 40)))
      (amacs-shell--eval-line (plist-get event :form))))
  (amacs-shell--show-now))

(defun amacs-shell--eval-line (form)
  "Show an eval of FORM as a summary line whose result is pending; return its id.
The id names the eval's invisibility symbol: `amacs-shell--eval-finish'
gives the line its result."
  (let ((id (intern (format "amacs-eval-%d" (setq amacs-shell--eval-count (1+ amacs-shell--eval-count))))))
    (amacs-shell--editing
      (add-to-invisibility-spec id)
      (amacs-shell--fresh-line)
      (let ((start (copy-marker amacs-shell--out nil)))
        (amacs-shell--insert-output
         (propertize (concat "▸ eval "
                             (amacs-shell--one-line form (min amacs-shell-eval-preview-chars
                                                              (- (amacs-shell--width) 25))))
                     'font-lock-face 'amacs-shell-eval 'amacs-eval id
                     'help-echo "TAB or RET: show the form and its result"))
        (put id 'amacs-pending (copy-marker amacs-shell--out nil))
        (amacs-shell--insert-output (propertize (substitute-command-keys " … (\\[keyboard-quit] stops it)")
                                                'font-lock-face 'amacs-shell-eval 'amacs-eval id))
        (amacs-shell--insert-output (amacs-shell--eval-detail id (amacs-shell--pretty form)
                                                              'font-lock-constant-face))
        (put id 'amacs-summary start)
        (put id 'amacs-details-end (copy-marker amacs-shell--out nil))
        (amacs-shell--insert-output (propertize "\n" 'amacs-eval id))))
    id))

(defun amacs-shell--show-now ()
  "Redisplay the shell now, before an eval blocks Emacs.
A form that runs long (`sleep-for', a busy loop) lets nothing redraw
until it ends, and the person saw the state from before the eval
\(\"writing…\") with no word that \\[keyboard-quit] stops it.  The
header line and the eval's line are drawn first; this costs a
redisplay per eval (a few ms in a terminal), next to a model call per
eval.  Nothing is drawn without a window showing the shell."
  (let ((buf (amacs-shell--buffer)))
    (when (and buf (get-buffer-window buf 'visible))
      (amacs-shell--update-header)
      (redisplay t))))

(defun amacs-shell--pretty (form)
  "FORM (a string of elisp) pretty-printed, or as written if it does not read."
  (condition-case nil
      (let ((read (read-from-string form)))
        (if (string-blank-p (substring form (cdr read)))
            (amacs-shell--pp (car read) (max 40 (- (amacs-shell--width) 4)))
          (string-trim-right form)))
    (error (string-trim-right form))))

(defun amacs-shell--pp (sexp width)
  "SEXP printed as code is written, in lines of at most WIDTH columns if it can.
A list that fits on its line stays on it; one that does not keeps its
head and the arguments its indentation sets apart (`let''s bindings,
`defun''s name and arguments; a call's first argument) on the first
line and puts each other element on a line of its own, indented as
`emacs-lisp-mode' indents.  Emacs 28's `pp' broke every list that
had a list in it: (goto-char and (point-max)) on two lines."
  (with-temp-buffer
    ;; Lisp's syntax and indentation, without `emacs-lisp-mode''s hooks (the person's own).
    (set-syntax-table emacs-lisp-mode-syntax-table)
    (setq-local lisp-indent-function #'lisp-indent-function)
    (setq indent-tabs-mode nil)
    (let ((print-escape-newlines nil) (print-quoted t))
      (insert (prin1-to-string sexp)))
    (goto-char (point-min))
    (amacs-shell--pp-sexp width)
    (buffer-string)))

(defun amacs-shell--pp-sexp (width)
  "Break the sexp at point over lines where it passes column WIDTH.
Point is left at its end."
  (let ((data (memq (char-after) '(?' ?`))))  ; a quoted list is data: no head
    (skip-chars-forward "'`,@#")
    (if (not (memq (char-after) '(?\( ?\[)))
        (forward-sexp)
      (amacs-shell--pp-list width data))))

(defun amacs-shell--pp-list (width data)
  "Break the list at point over lines where it passes column WIDTH.
DATA: the list is quoted, each element after the first on its own line."
  (let ((start (point))
        (end (copy-marker (save-excursion (forward-sexp) (point)))))
    (when (> (save-excursion (goto-char end) (current-column)) width)
      (let* ((head (save-excursion (forward-char) (ignore-errors (read (current-buffer)))))
             (spec (and (symbolp head) (eq (char-after) ?\() (function-get head 'lisp-indent-function)))
             (kept (cond ((or data (eq (char-after) ?\[)) 1)
                         ((integerp spec) (1+ spec))
                         ((eq spec 'defun) 3)
                         (t 2))))
        (forward-char)
        (dotimes (_ kept) (ignore-errors (forward-sexp)))
        (while (progn (skip-chars-forward " \t\n") (< (point) (1- end)))
          (delete-horizontal-space)
          (insert "\n")
          (forward-sexp))
        (goto-char start)
        (indent-sexp)))
    (forward-char)                      ; into the list: its elements, each broken where it passes WIDTH
    (while (progn (skip-chars-forward " \t\n") (< (point) (1- end)))
      (amacs-shell--pp-sexp width))
    (goto-char end)
    (set-marker end nil)))

(defun amacs-shell--eval-detail (id text face)
  "TEXT as a hidden detail line of eval ID, in FACE."
  (propertize (concat "\n" text) 'invisible id 'amacs-eval id 'font-lock-face face
              'line-prefix "    " 'wrap-prefix "    "))

(defun amacs-shell--eval-done (event result)
  "Finish the summary line of the eval in EVENT with RESULT (value or error).
The primary's eval that registered a wait (`amacs--eval-wait') leaves
it sleeping: the header says for whom.  An eval the person stopped
with \\[keyboard-quit] is said to have been stopped."
  (let ((agent (or (plist-get event :agent) "primary"))
        (stopped (equal (plist-get result :error) amacs-eval-stopped)))
    (amacs-shell--transition 'eval-end (list agent amacs--eval-wait amacs--eval-talks))
    (if (not (equal agent "primary"))
        (amacs-shell--agent-doing agent nil)
      (amacs-shell--eval-finish (intern (format "amacs-eval-%d" amacs-shell--eval-count)) result))
    (when stopped
      (amacs-shell--note
       (format "You stopped %s (%s): %s gets that as its result and goes on; %s stops %s."
               (if (equal agent "primary") "the eval" (concat agent "'s eval"))
               (substitute-command-keys "\\[keyboard-quit]")
               (if (equal agent "primary") "the agent" agent)
               (substitute-command-keys "\\<amacs-shell-mode-map>\\[amacs-shell-interrupt]")
               (if (equal agent "primary") "its turn" "every agent's work"))))
    (amacs-shell--update-header)))

(defun amacs-shell--eval-finish (id result)
  "Finish the summary line of eval ID with RESULT.
RESULT is a plist of :success, :result and :error, as an eval gives."
  (let* ((start (get id 'amacs-summary))
         (details-end (get id 'amacs-details-end))
         (ok (plist-get result :success))
         (face (if ok 'amacs-shell-eval 'amacs-shell-eval-error))
         (value (if ok (or (plist-get result :result) "nil")
                  (concat "error: " (or (plist-get result :error) "?")))))
    (when (and start (marker-buffer start))
      (amacs-shell--editing
        (goto-char details-end)
        (insert (amacs-shell--output-props
                 (amacs-shell--eval-detail
                  id (concat (if ok "⇒ " "error: ")
                             (string-trim-right (if ok value (or (plist-get result :error) "?"))))
                  (if ok 'default 'amacs-shell-error))))
        (let* ((pending (get id 'amacs-pending))
               (used (- pending start)))
          (goto-char pending)
          (delete-region pending (next-single-property-change pending 'invisible nil (point-max)))
          (insert (amacs-shell--output-props
                   (concat " → " (amacs-shell--one-line value (max 10 (- (amacs-shell--width) 3 used))))))
          (add-text-properties start (point) (list 'font-lock-face face 'amacs-eval id))
          (set-marker pending nil)
          (put id 'amacs-pending nil)))
      (set-marker start nil)
      (set-marker details-end nil)
      (put id 'amacs-summary nil)
      (put id 'amacs-details-end nil))))

(defvar amacs-shell--tool-count 0
  "Tool calls shown so far; names each one's invisibility symbol.")

(defun amacs-shell--tool-line (name arguments value error seconds)
  "Show a tool call of the primary's eval on its own line under the eval line.
NAME, ARGUMENTS, VALUE, ERROR and SECONDS are as
`amacs-tool-call-functions' gives them; \\[amacs-shell-toggle] shows
its arguments and its whole result."
  (when (equal (amacs-shell-turn-eval-agent (amacs-shell--turn)) "primary")
    (let ((id (intern (format "amacs-tool-%d" (setq amacs-shell--tool-count (1+ amacs-shell--tool-count)))))
          (shown (if error (concat "error: " error) (amacs--print-result value)))
          (face (if error 'amacs-shell-eval-error 'amacs-shell-eval)))
      (amacs-shell--editing
        (add-to-invisibility-spec id)
        (amacs-shell--fresh-line)
        (amacs-shell--insert-output
         (concat (propertize (format "▸ tool %s → %s" name
                                     (amacs-shell--one-line shown (max 10 (- (amacs-shell--width) 14 (length name)))))
                             'font-lock-face face 'amacs-eval id 'line-prefix "  "
                             'help-echo "TAB or RET: show its arguments and result")
                 (amacs-shell--eval-detail id (format "arguments: %S (%.2f s)" arguments seconds)
                                           'font-lock-constant-face)
                 (amacs-shell--eval-detail id (concat (if error "" "⇒ ") shown)
                                           (if error 'amacs-shell-error 'default))
                 (propertize "\n" 'amacs-eval id)))))))

(add-hook 'amacs-tool-call-functions #'amacs-shell--tool-line)

(defun amacs-shell-toggle ()
  "Show or hide the form and result of the eval at point."
  (interactive)
  (let ((id (get-text-property (point) 'amacs-eval)))
    (unless id (user-error "No eval here"))
    (let ((show (memq id (if (listp buffer-invisibility-spec) buffer-invisibility-spec nil))))
      (if show (remove-from-invisibility-spec id) (add-to-invisibility-spec id))
      (amacs-shell--eval-arrow (point) (if show "▾" "▸")))
    (force-window-update (current-buffer))))

(defun amacs-shell--eval-arrow (pos arrow)
  "Make ARROW the first character of the eval line at POS: ▸ folded, ▾ shown."
  (let* ((id (get-text-property pos 'amacs-eval))
         (start (if (and (> pos (point-min)) (eq (get-text-property (1- pos) 'amacs-eval) id))
                    (previous-single-property-change pos 'amacs-eval nil (point-min))
                  pos)))
    (when (member (buffer-substring-no-properties start (min (point-max) (1+ start))) '("▸" "▾"))
      (save-excursion
        (let ((inhibit-read-only t)
              (props (text-properties-at start)))
          (goto-char start)
          (delete-char 1)
          (insert (apply #'propertize arrow props)))))))

(defun amacs-shell-tab ()
  "Show or hide the eval at point; elsewhere in the output, go to the next eval.
At the prompt TAB does nothing: what you say to the agent has nothing
to complete (comint's completion listed files in a window of its own)."
  (interactive)
  (cond ((get-text-property (point) 'amacs-eval) (amacs-shell-toggle))
        ((< (point) (marker-position amacs-shell--out)) (amacs-shell-next-eval 1))))

(defun amacs-shell--eval-line-start (pos direction)
  "Return the start of the eval line nearest POS in DIRECTION (1 or -1), or nil.
An eval is one run of its own `amacs-eval' value, from its summary
line to the newline after its hidden details; it starts with ▸ or ▾."
  (let ((p pos) found)
    (while (and (not found) p)
      (let ((next (if (> direction 0)
                      (next-single-property-change p 'amacs-eval nil (point-max))
                    (previous-single-property-change p 'amacs-eval nil (point-min)))))
        (setq p (and (/= next p) next))
        (when (and p (get-text-property p 'amacs-eval)
                   (not (eq (get-text-property p 'amacs-eval)
                            (and (> p (point-min)) (get-text-property (1- p) 'amacs-eval))))
                   (if (> direction 0) (> p pos) (< p pos)))
          (setq found p))))
    found))

(defun amacs-shell-next-eval (n)
  "Move to the Nth next eval line (previous when N < 0)."
  (interactive "p")
  (let ((pos (point)) (direction (if (< n 0) -1 1)))
    (dotimes (_ (abs n))
      (setq pos (or (amacs-shell--eval-line-start pos direction) pos)))
    (if (= pos (point))
        (message "No %s eval" (if (< n 0) "earlier" "later"))
      (goto-char pos))))

(defun amacs-shell-previous-eval (n)
  "Move to the Nth previous eval line."
  (interactive "p")
  (amacs-shell-next-eval (- n)))

(defun amacs-shell-return ()
  "Send the input at the prompt; above it, act on what point is on.
On an eval line, show or hide its form and result.  On a past input,
put it at the prompt to edit and send again (a draft there goes to the
kill ring).  Elsewhere above the prompt, send nothing: comint would
send the line point is on, a reply's text or an input with its prompt."
  (interactive)
  (amacs-shell--revive)
  (let ((pmark (marker-position (process-mark (get-buffer-process (current-buffer)))))
        input)
    (cond ((>= (point) pmark) (comint-send-input))
          ((and (< (point) (marker-position amacs-shell--out))
                (get-text-property (point) 'amacs-eval))
           (amacs-shell-toggle))
          ((setq input (amacs-shell--past-input (point)))
           (let ((draft (buffer-substring pmark (point-max))))
             (unless (string-empty-p draft) (kill-new draft))
             (delete-region pmark (point-max))
             (goto-char (point-max))
             (insert input)
             (message "%s" (substitute-command-keys
                            (concat "Edit, then \\<amacs-shell-mode-map>\\[amacs-shell-return] sends it"
                                    (if (string-empty-p draft) "" "; your draft is in the kill ring (\\[yank])"))))))
          (t (message "%s" (substitute-command-keys
                            "\\<amacs-shell-mode-map>\\[amacs-shell-return] sends from the prompt; on a past input it puts that input there"))))))

(defun amacs-shell--past-input (pos)
  "Return the person's past input at POS, without its prompt, or nil.
POS may be on the input or on its prompt."
  (let* ((start (if (get-text-property pos 'amacs-prompt)
                    (next-single-property-change pos 'amacs-prompt nil (point-max))
                  (amacs-shell--input-start (min (1+ pos) (point-max)) -1)))
         (end (and start (next-single-property-change start 'font-lock-face nil (point-max)))))
    (when (and start (< start end) (<= start (max pos start)) (<= pos end)
               (memq (get-text-property start 'font-lock-face)
                     '(comint-highlight-input amacs-shell-error)))
      (string-trim-right (buffer-substring-no-properties start end)))))

;;;; Footer: working subagents and queued input

(defun amacs-shell--input-line (line &optional face)
  "LINE, a prompt and an input, in the faces comint gives them, or in FACE.
The prompt is marked `amacs-prompt', for \\[amacs-shell-previous-prompt]."
  (let ((n (if (string-prefix-p amacs-shell-prompt line) (length amacs-shell-prompt) 0)))
    (concat (propertize (substring line 0 n) 'font-lock-face (or face 'comint-highlight-prompt)
                        'amacs-prompt t)
            (propertize (substring line n) 'font-lock-face (or face 'comint-highlight-input)))))

(defun amacs-shell--input-start (pos direction)
  "Return the start of the person's input nearest POS in DIRECTION.
DIRECTION is 1 (after POS) or -1 (before it).  An input begins where
a prompt marked `amacs-prompt' ends: past inputs and the one at the
live prompt.  Return nil when there is none that way."
  (let ((p pos) found)
    (while (and (not found) p)
      (let ((next (if (> direction 0)
                      (next-single-property-change p 'amacs-prompt nil (point-max))
                    (previous-single-property-change p 'amacs-prompt nil (point-min)))))
        (setq p (and (/= next p) next))
        (when (and p (> p (point-min)) (get-text-property (1- p) 'amacs-prompt)
                   (not (get-text-property p 'amacs-prompt))
                   (if (> direction 0) (> p pos) (< p pos)))
          (setq found p))))
    found))

(defun amacs-shell-next-prompt (n)
  "Move to the start of the person's Nth next input (previous when N < 0).
As comint's \\[comint-next-prompt], but only the person's inputs count:
eval lines, replies and notes are passed over."
  (interactive "p")
  (let ((pos (point)) (direction (if (< n 0) -1 1)))
    (dotimes (_ (abs n))
      (setq pos (or (amacs-shell--input-start pos direction) pos)))
    (if (= pos (point))
        (message "No %s input" (if (< n 0) "earlier" "later"))
      (goto-char pos))))

(defun amacs-shell-previous-prompt (n)
  "Move to the start of the person's Nth previous input.
As comint's \\[comint-previous-prompt], but only the person's inputs
count: eval lines, replies and notes are passed over."
  (interactive "p")
  (amacs-shell-next-prompt (- n)))

(defun amacs-shell--footer-lines (property)
  "Return (START . END) of the footer's lines carrying PROPERTY, or nil."
  (let ((pos (marker-position amacs-shell--out))
        (end (marker-position amacs-shell--prompt-start))
        start stop)
    (while (< pos end)
      (when (get-text-property pos property)
        (unless start (setq start pos))
        (setq stop (1+ pos)))
      (setq pos (1+ pos)))
    (and start (cons start stop))))

(defun amacs-shell--draw-agents ()
  "Redraw the footer's lines of working subagents."
  (amacs-shell--editing
    (let ((old (amacs-shell--footer-lines 'amacs-agent-line)))
      (when old (delete-region (car old) (cdr old))))
    (let* ((shown (seq-take amacs-shell--agents amacs-shell-agent-lines))
           (more (- (length amacs-shell--agents) (length shown)))
           (lines (concat
                   (mapconcat
                    (lambda (a)
                      (amacs-shell--one-line
                       (format "⟳ %s (%s): %s" (plist-get a :id) (or (plist-get a :template) "?")
                               (or (plist-get a :doing) (plist-get a :state) "working"))
                       (amacs-shell--width)))
                    shown "\n")
                   (if (> more 0)
                       (format "\n⟳ and %d more (%s lists them)" more
                               (substitute-command-keys "\\<amacs-shell-mode-map>\\[amacs-hub]"))
                     "")
                   (if shown "\n" ""))))
      (unless (string-empty-p lines)
        (amacs-shell--insert-footer
         amacs-shell--out
         (propertize lines 'font-lock-face 'amacs-shell-agent 'amacs-agent-line t
                     'read-only t 'front-sticky t 'rear-nonsticky t 'field 'output)))))
  (amacs-shell--update-header))

(defun amacs-shell--on-agents (event)
  "The server reports the subagents at work in EVENT: one footer line each.
One that was at work and is no longer has answered what it was asked."
  (let* ((before (mapcar (lambda (a) (plist-get a :id)) amacs-shell--agents))
         (now (append (plist-get event :agents) nil))
         (ids (mapcar (lambda (a) (plist-get a :id)) now)))
    (setq amacs-shell--agents now)
    (dolist (id before)
      (unless (member id ids) (amacs-shell--transition 'answered id))))
  (amacs-shell--draw-agents))

(defun amacs-shell--agent-doing (agent doing)
  "Show that AGENT is DOING something (nil: back to its reported state)."
  (let ((entry (seq-find (lambda (a) (equal (plist-get a :id) agent)) amacs-shell--agents)))
    (when entry
      (setq amacs-shell--agents
            (mapcar (lambda (a) (if (eq a entry) (plist-put (copy-sequence a) :doing doing) a))
                    amacs-shell--agents))
      (amacs-shell--draw-agents))))

(defvar amacs-shell--queued-count 0
  "Inputs queued so far: each queued entry's own `amacs-queued' value.")

(defun amacs-shell--queue (line)
  "Show LINE (the prompt and an input) as queued; return the entry's id.
Its last newline displays as \"  ⋯ queued\" first: the label is not text,
so the input moves into the conversation unchanged."
  (amacs-shell--editing
    (amacs-shell--insert-footer
     amacs-shell--prompt-start
     (propertize (concat (substring line 0 -1)
                         (propertize "\n" 'display (propertize "  ⋯ queued\n" 'face 'amacs-shell-queued)))
                 'font-lock-face 'amacs-shell-queued
                 'amacs-queued (setq amacs-shell--queued-count (1+ amacs-shell--queued-count))
                 'read-only t 'front-sticky t 'rear-nonsticky t 'field 'output
                 'help-echo "Sent; the agent takes it when it is done")))
  amacs-shell--queued-count)

(defun amacs-shell--mark-sent (id)
  "Mark queued entry ID as handed to the server (not just waiting for one)."
  (amacs-shell--editing
    (let ((region (amacs-shell--footer-lines 'amacs-queued)) pos)
      (when region
        (setq pos (text-property-any (car region) (cdr region) 'amacs-queued id))
        (when pos
          (put-text-property pos (next-single-property-change pos 'amacs-queued nil (cdr region))
                             'amacs-sent t))))))

(defun amacs-shell--take-queued (&optional face note sent)
  "Move the oldest queued input into the output, in FACE; then NOTE, if any.
SENT: only if it was handed to a server (t) or only if not (`waiting').
Return its line (the prompt and the input) if there was one."
  (amacs-shell--editing
    (let ((region (amacs-shell--footer-lines 'amacs-queued)))
      (when (and region (pcase sent
                          ('t (get-text-property (car region) 'amacs-sent))
                          ('waiting (not (get-text-property (car region) 'amacs-sent)))
                          (_ t)))
        ;; An entry is a run of one `amacs-queued' value: an input of several lines moves whole.
        (let* ((end (next-single-property-change (car region) 'amacs-queued nil (cdr region)))
               (line (buffer-substring-no-properties (car region) end)))
          (delete-region (car region) end)
          (amacs-shell--fresh-line)
          (amacs-shell--insert-output (amacs-shell--input-line line face))
          (when note (amacs-shell--insert-output (propertize (concat note "\n") 'font-lock-face face)))
          line)))))

(defun amacs-shell--on-input-taken (event)
  "The agent took the oldest input sent: it becomes part of the conversation.
A primary waiting for your reply has it.  EVENT says whether it is saved
in agent-chat.org (`:saved')."
  (amacs-shell--transition 'answered "you")
  (let ((line (amacs-shell--take-queued)))
    (when line (amacs-shell--transition 'taken (cons line (plist-get event :saved))))))

(defun amacs-shell--say-what-was-kept ()
  "The server stopped mid-turn: say so once, with what of this turn is on disk.
An input is said to be saved only if the server confirmed it was
written to agent-chat.org; otherwise it is in the history.
The transport's notice (`amacs-stopped': what happened, how to go on,
the log) and these facts are one notice, each line a `;;' line."
  (let* ((turn (amacs-shell--turn))
         (replied (amacs-shell-turn-replied turn))
         (saved (seq-filter #'cdr (amacs-shell-turn-taken turn)))
         (unsaved (seq-remove #'cdr (amacs-shell-turn-taken turn)))
         (history (substitute-command-keys "\\<amacs-shell-mode-map>\\[comint-previous-input]"))
         (kept (delq nil
                     (list (cond ((and saved replied)
                                  " before the agent's turn ended; your input and the reply shown are saved in agent-chat.org")
                                 (saved " before the agent replied; your input is saved in agent-chat.org"))
                           (and unsaved
                                (format "%s your input%s went to the agent that asked, not to agent-chat.org: %s brings %s back"
                                        (if saved "; and" ";") (if (cdr unsaved) "s" "")
                                        history (if (cdr unsaved) "them" "it")))))))
    (when saved (setq amacs-shell--stop-said t))
    (when (and kept (amacs-shell--buffer))
      ;; Without `amacs-stopped' the server was stopped on purpose (`amacs-restart').
      (let ((stop (or amacs-stopped
                      (cons "The server stopped"
                            (and saved (not replied) "Send again to continue.")))))
        (setq amacs-stopped nil)          ; said here: the transport says no more
        (amacs-shell--output
         (amacs-shell--comment-lines
          (concat (car stop) (apply #'concat kept) "." (and (cdr stop) (concat " " (cdr stop)))))
         'amacs-shell-warning)))))

(defun amacs-shell--drop-queued (why sent)
  "Queued inputs will not be taken, because of WHY: say so for each.
SENT: those handed to the server that went (t), or those still waiting
for a server (`waiting'); inputs typed after a server went wait for the next.
WHY is a sentence of its own for those sent: the server may have written
one before it went without saying so: only what is true is said."
  (let ((history (substitute-command-keys "\\<amacs-shell-mode-map>\\[comint-previous-input]")))
    (while (amacs-shell--take-queued
            'amacs-shell-error
            (if (eq sent t)
                (format ";; %s: %s brings it back." why history)
              (format ";; Not sent: %s. %s brings it back." why history))
            sent))))

;;;; State: header line and mode line

(cl-defstruct (amacs-shell-turn (:constructor amacs-shell--new-turn) (:copier nil))
  "What a shell knows of the agent's turn; `amacs-shell--transition' alone changes it.
STATE is what the agent is doing: starting, waiting, thinking,
streaming, eval, sleeping, retrying or stopped.  DETAIL says more:
whom it sleeps on (sleeping), the seconds before the next attempt
\(retrying; nil: now).  SINCE is when STATE began, a float time.
EVAL-AGENT is the agent whose eval Emacs runs, or nil: while it runs
Emacs does nothing else, so the header says so.  ANSWERED-EARLY are
those who answered while the primary's eval ran, before it could sleep
on them.  TAKEN are the inputs the agent took in this turn, newest
first, (LINE . SAVED) each: SAVED when the server confirmed the input
is in agent-chat.org (its write-ahead), and only then does the shell
say it is saved.  REPLIED is non-nil once a reply was shown (the
server writes a reply before it shows it).  WAIT-TIMER ends a sleep at
its timeout; CLOCK redraws the header's seconds while the agent works."
  (state 'starting) detail since eval-agent answered-early taken replied wait-timer clock)

(defvar-local amacs-shell--turn-of-buffer nil
  "This shell's turn, an `amacs-shell-turn'.")

(defun amacs-shell--turn ()
  "Return the shell buffer's turn; without a shell, a fresh one that is dropped."
  (let ((buffer (amacs-shell--buffer)))
    (or (and buffer (buffer-local-value 'amacs-shell--turn-of-buffer buffer))
        (amacs-shell--new-turn))))

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
      ('sent (unless amacs-shell-busy (amacs-shell--enter turn (if (amacs-live-p) 'thinking 'starting)))
             (setq amacs-shell-busy t))
      ('turn-start (setq amacs-shell-busy t)
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
      ('taken (push arg (amacs-shell-turn-taken turn)))
      ('replied (setf (amacs-shell-turn-replied turn) t))
      ('turn-done (setq amacs-shell-busy nil)
                  (setf (amacs-shell-turn-taken turn) nil (amacs-shell-turn-replied turn) nil)
                  (amacs-shell--enter turn 'waiting))
      ('ready (amacs-shell--enter turn (if amacs-shell-busy 'thinking 'waiting)))
      ('gone (setq amacs-shell-busy (and arg t))
             (setf (amacs-shell-turn-taken turn) nil (amacs-shell-turn-replied turn) nil
                   (amacs-shell-turn-eval-agent turn) nil)
             (amacs-shell--enter turn (if arg 'starting 'stopped)))
      ('cancelled (setq amacs-shell-busy nil)
                  (amacs-shell--enter turn 'waiting))
      ('failed (setq amacs-shell-busy nil)
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
    (unless (amacs-shell-turn-clock turn)
      (setf (amacs-shell-turn-clock turn) (run-at-time 1 1 #'amacs-shell--update-header)))))

(defun amacs-shell-state ()
  "Return the state of the shell's turn, a symbol (see `amacs-shell-turn')."
  (amacs-shell-turn-state (amacs-shell--turn)))

(defun amacs-shell-state-string ()
  "What the agent is doing, in a few words, for the header line."
  (let* ((turn (amacs-shell--turn))
         (since (amacs-shell-turn-since turn))
         (detail (amacs-shell-turn-detail turn))
         (eval-agent (amacs-shell-turn-eval-agent turn))
         (secs (and since (floor (- (float-time) since))))
         (elapsed (if (and secs (>= secs 1)) (format " %ds" secs) ""))
         (agents (length amacs-shell--agents))
         (doing (pcase (amacs-shell-turn-state turn)
                  ('starting "starting the server…")
                  ('waiting (if (and amacs--status (not (plist-get amacs--status :key-ok)))
                                "no API key: the note below says how to give one"
                              "waiting for you"))
                  ('thinking (concat "thinking…" elapsed))
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
    (if (> agents 0)
        (format "%s · %d agent%s working" doing agents (if (= agents 1) "" "s"))
      doing)))

(defun amacs-shell--stops-it ()
  "The words that say which key stops a running eval."
  (substitute-command-keys "(\\[keyboard-quit] stops it)"))

(defun amacs-shell--names (names)
  "NAMES (whom the agent waits for) in a few words: \"you\" is your reply."
  (let* ((words (mapcar (lambda (n) (if (equal n "you") "your reply" n)) names))
         (shown (seq-take words 3)))
    (concat (mapconcat #'identity shown ", ")
            (if (> (length words) 3) (format " and %d more" (- (length words) 3)) ""))))

(defun amacs-shell--sleep (turn wait talks)
  "TURN's primary sleeps on WAIT until its talks are answered; TALKS say by whom.
WAIT is `amacs--eval-wait' and TALKS `amacs--eval-talks' of the eval
that registered it.  The header names those it waits for until each
answers, the wait times out, or the agent does something else."
  (let ((names (seq-difference
                (seq-uniq (mapcar (lambda (id) (or (cdr (assq id talks)) (format "talk %s" id)))
                                  (plist-get wait :talk-ids)))
                (amacs-shell-turn-answered-early turn)))
        (timeout (plist-get wait :timeout)))
    (setf (amacs-shell-turn-answered-early turn) nil)
    (amacs-shell--enter turn (if names 'sleeping 'thinking) names)
    (when (amacs-shell-turn-wait-timer turn) (cancel-timer (amacs-shell-turn-wait-timer turn)))
    (setf (amacs-shell-turn-wait-timer turn)
          (and names (numberp timeout)
               (run-at-time timeout nil (lambda ()
                                          (setf (amacs-shell-turn-wait-timer turn) nil)
                                          (amacs-shell--transition 'woke)))))))

(defun amacs-shell--answered (turn who)
  "WHO (an agent's id, or \"you\") answered: TURN's primary waits for one less.
Once everyone has answered, the primary wakes: it is thinking."
  (let ((state (amacs-shell-turn-state turn))
        (waiting-for (amacs-shell-turn-detail turn)))
    (cond ((eq state 'eval) (push who (amacs-shell-turn-answered-early turn)))
          ((and (eq state 'sleeping) (member who waiting-for))
           (let ((left (remove who waiting-for)))
             (amacs-shell--enter turn (if left 'sleeping 'thinking) left))))))

(defun amacs-shell-header-line (&optional width)
  "The shell's header line: the model, the backend and what the agent is doing.
Wider than WIDTH (default: the shell's window), the backend goes, then
the model: what the agent does is what the header is for, and it
keeps the room."
  (let* ((model (plist-get amacs--status :model))
         (backend (plist-get amacs--status :backend))
         (state (amacs-shell-state-string))
         (width (or width
                    (let ((window (get-buffer-window (amacs-shell--buffer))))
                      (if window (window-total-width window) 80)))))
    (seq-find (lambda (line) (<= (string-width line) width))
              (list (concat " " (if model (format "%s (%s)" model backend) "AMACS") " — " state)
                    (concat " " (or model "AMACS") " — " state))
              (concat " " state))))

(defun amacs-shell--update-header ()
  "Redraw the header line (and mode line) of the shell."
  (let ((buf (amacs-shell--buffer)))
    (when buf
      (with-current-buffer buf (force-mode-line-update)))))

(defvar amacs-shell-usage nil
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
  (setq amacs-shell-usage event)
  (amacs-shell--update-header))

;;;; Events of a turn

(defun amacs-shell--on-annotation (event)
  "Show the one-line note in EVENT in its kind's face.
A note is for the person: the shell decides nothing from its words.
What the shell acts on comes as an event with fields of its own."
  (let ((text (plist-get event :text))
        (kind (plist-get event :kind)))
    (amacs-shell--output
     (if (equal kind "agent")
         (amacs-shell--one-line text (* 2 (amacs-shell--width)))
       (concat ";; " text))
     (pcase kind
       ("agent" 'amacs-shell-agent)
       ("warning" 'amacs-shell-warning)
       ("error" 'amacs-shell-error)
       ("status" 'amacs-shell-status)
       (_ 'amacs-shell-annotation)))))

(defun amacs-shell--on-retry (event)
  "The model call is retried in EVENT's :seconds: the header counts them down."
  (let ((seconds (plist-get event :seconds)))
    (amacs-shell--transition 'retry (and (numberp seconds) (>= seconds 0.05) seconds))
    (amacs-shell--output (concat ";; " (plist-get event :text)) 'amacs-shell-status)))

(defun amacs-shell--on-agent-ended (event)
  "Subagent :id of EVENT ended: ✓ when it answered (:ok), ✗ when not.
The primary waiting for it has its result."
  (amacs-shell--transition 'answered (plist-get event :id))
  (amacs-shell--output
   (amacs-shell--one-line (concat (if (plist-get event :ok) "✓ " "✗ ") (plist-get event :text))
                          (* 2 (amacs-shell--width)))
   (if (plist-get event :ok) 'amacs-shell-agent 'amacs-shell-warning)))

(defun amacs-shell--on-turn-start (_event)
  "The agent started a turn."
  (amacs-shell--transition 'turn-start))

(defun amacs-shell--on-turn-done (_event)
  "The agent waits for the person: a stream left open is discarded."
  (amacs-shell--discard-stream "the turn ended before the reply was complete")
  (amacs-shell--editing (amacs-shell--fresh-line t))
  (amacs-shell--transition 'turn-done))

(amacs-on-event "reply" #'amacs-shell--on-reply)
(amacs-on-event "reply-delta" #'amacs-shell--on-reply-delta)
(amacs-on-event "thinking-delta" #'amacs-shell--on-thinking-delta)
(amacs-on-event "reply-abandon" #'amacs-shell--on-reply-abandon)
(amacs-on-event "annotation" #'amacs-shell--on-annotation)
(amacs-on-event "retry" #'amacs-shell--on-retry)
(amacs-on-event "agent-ended" #'amacs-shell--on-agent-ended)
(amacs-on-event "turn-done" #'amacs-shell--on-turn-done)
(amacs-on-event "turn-start" #'amacs-shell--on-turn-start)
(amacs-on-event "input-taken" #'amacs-shell--on-input-taken)
(amacs-on-event "agents" #'amacs-shell--on-agents)
(amacs-on-event "tick" #'amacs-shell--on-tick)
(add-hook 'amacs-eval-start-functions #'amacs-shell--eval-start)
(add-hook 'amacs-eval-done-functions #'amacs-shell--eval-done)

;;;; Connection

(defvar-local amacs-shell--resumed nil
  "Non-nil once this shell has shown the earlier exchanges.")

(defun amacs-shell--resume ()
  "Show the last exchanges of agent-chat.org; greet a new person."
  (let ((buffer (amacs-shell--buffer))
        (recent (last (plist-get amacs--status :recent) (max 0 amacs-shell-resume-exchanges))))
    (when (and buffer (not (buffer-local-value 'amacs-shell--resumed buffer)))
      (with-current-buffer buffer
        (setq amacs-shell--resumed t))     ; once per shell, even when there is nothing to show
      (if (null (plist-get amacs--status :recent))
          (amacs-shell--output
           (substitute-command-keys
            (concat ";; Type to the agent and press RET (\\<amacs-shell-mode-map>\\[amacs-shell-newline] for a new line).  "
                    "\\[amacs-shell-interrupt] interrupts, \\[amacs-hub] opens the hub.\n"
                    ";; Ask it \"what can you do?\", or \\[describe-mode] for every key."))
           'amacs-shell-annotation)
        (dolist (entry recent)
          (when (plist-get entry :human)
            (amacs-shell--output (amacs-shell--input-line
                                  (concat amacs-shell-prompt (plist-get entry :human)))))
          (when (plist-get entry :status)   ; no reply, and why: as the live shell said it
            (amacs-shell--output (concat ";; (" (plist-get entry :status) ")") 'amacs-shell-annotation))
          (unless (string-blank-p (or (plist-get entry :agent) "")) ; a tick that only evaluated
            (amacs-shell--editing
              (amacs-shell--fresh-line t)
              (amacs-shell--insert-output (amacs-shell--resumed-reply (string-trim (plist-get entry :agent))))
              (amacs-shell--fresh-line t)))
          (let ((done (plist-get entry :eval)))  ; said, then evaluated: as the live shell drew it
            (when done
              (amacs-shell--eval-finish (amacs-shell--eval-line (plist-get done :form)) done))))
        (amacs-shell--output
         (substitute-command-keys
          ";; Resumed: the last exchanges from agent-chat.org (\\<amacs-shell-mode-map>\\[amacs-open-chat-log] opens it all).")
         'amacs-shell-annotation)))))

(defun amacs-shell--resumed-reply (text)
  "TEXT, a reply from the chat log, to show as the live shell showed it.
With org loaded it is rendered at once.  Without, it is plain for now
and marked `amacs-unrendered': loading org takes ~0.75 s, which the
person would wait for before seeing the shell, so it is rendered at
the first idle moment (`amacs-shell--render-resumed')."
  (if (featurep 'org)
      (concat (amacs-render-org text) "\n")
    (run-with-idle-timer 0.5 nil #'amacs-shell--render-resumed)
    (propertize (concat text "\n") 'amacs-unrendered text)))

(defun amacs-shell--render-resumed ()
  "Render the resumed replies still shown plain, in place, as live ones are."
  (amacs-shell--editing
    (let ((pos (point-min)))
      (while (setq pos (text-property-not-all pos (point-max) 'amacs-unrendered nil))
        (let* ((text (get-text-property pos 'amacs-unrendered))
               (end (next-single-property-change pos 'amacs-unrendered nil (point-max))))
          (delete-region pos end)
          (goto-char pos)
          (insert (amacs-shell--output-props (concat (amacs-render-org text) "\n")))
          (setq pos (point)))))))

(defun amacs-shell--greet ()
  "Say what the server reported at hello: a missing key, an interrupted turn."
  (amacs-shell--resume)
  (amacs-shell--transition 'ready)
  (amacs-shell--on-tick (list :session (plist-get amacs--status :session)
                              :spent (plist-get amacs--status :spent)
                              :budget-limit (plist-get amacs--status :budget-limit)))
  (let ((notice (plist-get amacs--status :notice)))
    (when notice (amacs-shell--output (concat ";; " notice) 'amacs-shell-warning)))
  (let ((said amacs-shell--stop-said))
    (setq amacs-shell--stop-said nil)
    (when (and (plist-get amacs--status :interrupted) (not said)) ; said when the server stopped
      (amacs-shell--output
       ";; Your last message got no reply before the server stopped; it is kept in agent-chat.org. Send again to continue."
       'amacs-shell-warning))))

(defun amacs-shell--on-disconnect ()
  "The server went away: close the stream, say what was kept and what was not sent."
  (amacs-shell--discard-stream "the server stopped")
  (amacs-shell--say-what-was-kept)
  (amacs-shell--drop-queued "The server stopped before it said it had saved this input" t)
  (setq amacs-shell--agents nil)
  (amacs-shell--draw-agents)
  (let ((waiting (let ((buffer (amacs-shell--buffer)))
                   (and buffer (with-current-buffer buffer
                                 (amacs-shell--footer-lines 'amacs-queued))))))
    ;; Input typed after the connection dropped waits for the next server: still busy.
    (amacs-shell--transition 'gone waiting)))

(defvar-local amacs-shell--greeted nil
  "Non-nil once this shell said how to reach the hub and the subagents.")

(defun amacs-shell--greet-once ()
  "Say once per shell how to reach the hub and talk to a subagent."
  (let ((buffer (amacs-shell--buffer)))
    (when (and buffer (not (buffer-local-value 'amacs-shell--greeted buffer)))
      (with-current-buffer buffer (setq amacs-shell--greeted t))
      (amacs-shell--note (substitute-command-keys
                          "\\<amacs-shell-mode-map>\\[amacs-hub] shows the agent and its subagents; \
@NAME text talks to one (@skeptic why?).")))))

(add-hook 'amacs-ready-hook #'amacs-shell--greet)
(add-hook 'amacs-ready-hook #'amacs-shell--greet-once 90)
(add-hook 'amacs-disconnect-hook #'amacs-shell--on-disconnect)

;;;; Commands

(defconst amacs-shell--said-at-once t
  "Why the commands that ask the server say at once what they do.
Emacs 28's \\[execute-extended-command], after a command without a key
that leaves the echo area empty, looks for a shorter name to suggest
inside `while-no-input', and keys typed meanwhile are lost.  With a
message shown it waits on `sit-for' instead, which typing ends, and
nothing is lost.")

;;;###autoload (autoload 'amacs-set-budget "amacs" "Set the agent's budget limit." t)
(defun amacs-set-budget (dollars)
  "Set the agent's budget limit to DOLLARS.
An agent stopped at its limit goes on with your next input."
  (interactive
   (let ((now (or (plist-get amacs-shell-usage :budget-limit) 5.0)))
     ;; The limit now beside the default (twice it): the prompt says what it is.
     (list (read-number (format "Budget limit in dollars, now %s: "
                                (amacs-shell--dollars now))
                        (* 2 now)))))
  ;; Said at once: see `amacs-shell--said-at-once'.
  (message "AMACS: setting the budget limit to %s…" (amacs-shell--dollars dollars))
  (amacs-when-ready
   (lambda () (amacs-call 'set_budget (list dollars)
                          (lambda (limit)
                            (setq amacs-shell-usage (plist-put amacs-shell-usage :budget-limit limit)
                                  amacs-chosen (plist-put amacs-chosen :budget limit))
                            (amacs-shell--on-tick amacs-shell-usage)
                            (message "AMACS: budget limit is now %s" (amacs-shell--dollars limit)))))))

;;;###autoload (autoload 'amacs-set-model "amacs" "Switch the agent's model or backend." t)
(defun amacs-set-model (backend model &optional base-url)
  "Switch the agent to MODEL on BACKEND from its next model call.
BACKEND is \"anthropic\" or \"openai\" (any OpenAI-compatible server);
BASE-URL points at such a server, e.g. Ollama or llama.cpp."
  (interactive
   (let* ((now (or (plist-get amacs--status :backend) "anthropic"))
          (backend (completing-read (format-prompt "Backend" now) '("anthropic" "openai") nil t nil nil now)))
     (list backend
           (read-string "Model: " (plist-get amacs--status :model))
           (let ((url (read-string "Base URL (empty: the one the server started with): "
                                   (and (equal backend "openai") "http://localhost:11434/v1"))))
             (unless (string-empty-p url) url)))))
  (message "AMACS: switching to %s on %s…" model backend) ; said at once: `amacs-shell--said-at-once'
  (amacs-when-ready
   (lambda ()
     (amacs-call 'set_model (list backend model base-url)
                 (lambda (now)
                   (setq amacs--status (plist-put amacs--status :model (plist-get now :model)))
                   (setq amacs--status (plist-put amacs--status :backend (plist-get now :backend)))
                   (setq amacs--status (plist-put amacs--status :key-ok (plist-get now :key-ok)))
                   (setq amacs-chosen (plist-put (plist-put (plist-put (plist-put amacs-chosen :backend (plist-get now :backend))
                                                                       :model (plist-get now :model))
                                                            :base-url base-url)
                                                 :local nil)) ; a restart no longer runs a local model
                   (amacs-shell--update-header)
                   (amacs-shell--note (concat (format "Now using %s on %s%s." (plist-get now :model)
                                                      (plist-get now :backend)
                                                      (if base-url (format " at %s" base-url) ""))
                                              ;; What the server still lacks to call it, in its words.
                                              (and (not (plist-get now :key-ok)) (plist-get now :missing)
                                                   (concat " " (plist-get now :missing))))))))))

(defun amacs-shell--save-history-everywhere ()
  "Save the history of the shell buffer, if there is one."
  (let ((buffer (amacs-shell--buffer)))
    (when buffer (with-current-buffer buffer (amacs-shell--save-history-safely)))))

(defvar-local amacs-shell--history-error nil
  "Non-nil once saving the history failed and was said; nil after a save works.")

(defun amacs-shell--save-history-safely ()
  "Save the history; if its file cannot be written, say so once and go on.
A read-only or full AMACS home must not stop an input from being sent:
the inputs stay in this Emacs's ring."
  (condition-case err
      (progn (amacs-shell--save-history)
             (setq amacs-shell--history-error nil))
    (error
     (unless amacs-shell--history-error
       (setq amacs-shell--history-error t)
       (amacs-shell--note
        (format "Could not save the input history to %s (%s); your inputs stay in this Emacs: %s brings them back."
                comint-input-ring-file-name
                (if (and (eq (car err) 'file-error) (stringp (nth 2 err))) ; e.g. (file-error "Opening output file" "Read-only file system" FILE)
                    (nth 2 err)
                  (error-message-string err))
                (substitute-command-keys "\\<amacs-shell-mode-map>\\[comint-previous-input]")))))))

(defconst amacs-shell--address-regexp "\\`@\\([[:alnum:]_-]+\\)[[:space:]]+\\([^z-a]*[^[:space:]][^z-a]*\\)\\'"
  "An input addressed to a subagent: @NAME, then what to say to it.")

(defun amacs-shell--say-to-agent (agent text line)
  "Say TEXT to the subagent AGENT (its id or a viewpoint's name); LINE is as typed.
Its answer shows in the shell under its name; the primary's turn goes on
untouched.  The server refuses an agent that does not exist or has ended."
  (amacs-shell--editing
    (delete-region amacs-shell--prompt-start (point-max))
    (amacs-shell--fresh-line)
    (amacs-shell--insert-output (amacs-shell--input-line (if (string-suffix-p "\n" line) line (concat line "\n")) nil))
    (amacs-shell--insert-prompt))
  (goto-char (point-max))
  (amacs-when-ready
   (lambda ()
     (amacs-call 'person_agent_talk (list agent text)
                 (lambda (r) (when (plist-get r :queued)
                               (amacs-shell--note (format "%s is at work; it answers when done." (plist-get r :to)))))
                 (lambda (err) (amacs-shell--note (concat "Not sent: " err)))))))

(defun amacs-shell--input-sender (proc input)
  "Send INPUT (typed in PROC's buffer) to the primary, or to a subagent.
An input @NAME TEXT goes to the subagent NAME (a viewpoint's name, or
an id such as task-1 or compulsion-2); any other to the primary."
  (let ((text (string-trim (substring-no-properties input))))
    (if (string-match amacs-shell--address-regexp text)
        (progn (amacs-shell--save-history-safely)
               (amacs-shell--say-to-agent (match-string 1 text) (match-string 2 text)
                                          (buffer-substring-no-properties amacs-shell--prompt-start (point-max))))
      (amacs-shell--send-to-primary proc input))))

(defun amacs-shell--send-to-primary (_proc input)
  "Send INPUT to the agent; return at once.  The history is saved each time.
The line sent waits in the footer as queued until the agent takes it."
  (amacs-shell--save-history-safely)
  (let* ((text (string-trim (substring-no-properties input)))
         (line (buffer-substring-no-properties amacs-shell--prompt-start (point-max)))
         (id nil))
    (amacs-shell--editing
      (delete-region amacs-shell--prompt-start (point-max))
      (unless (string-empty-p text)
        (setq id (amacs-shell--queue (if (string-suffix-p "\n" line) line (concat line "\n")))))
      (amacs-shell--insert-prompt))
    (goto-char (point-max))
    (unless (string-empty-p text)
      (amacs-shell--transition 'sent)
      (amacs-when-ready
       (lambda ()
         (amacs-shell--mark-sent id)
         (amacs-call 'submit (list text) nil
                     (lambda (err)
                       (amacs-shell--take-queued 'amacs-shell-error (concat ";; Not sent: " err)))))))))

(defun amacs-shell-interrupt ()
  "Stop the agent's turn: its model call and the evaluations it chains.
Your input stays in the chat log; the tick is recorded as interrupted.
While the server is still starting, the input waiting for it is not sent."
  (interactive)
  (cond
   ((amacs-live-p)
    (amacs-call 'interrupt nil
                (lambda (running)
                  (unless running (message "AMACS: the agent is not working on anything")))))
   ((> (amacs-cancel-waiting) 0)
    (amacs-shell--drop-queued "interrupted before the server was ready" 'waiting)
    (amacs-shell--transition 'cancelled))
   (t (message "AMACS: no server to interrupt"))))

(defun amacs-shell-newline ()
  "Insert a newline in the input; RET sends it."
  (interactive)
  (insert "\n"))

(defun amacs-shell-copy-reply ()
  "Copy the agent's last reply (its plain org text) to the kill ring."
  (interactive)
  (unless amacs-shell--last-reply (user-error "No reply yet"))
  (kill-new amacs-shell--last-reply)
  (message "Copied the last reply (%d characters)" (length amacs-shell--last-reply)))

(defun amacs-shell-copy-code ()
  "Copy the code of the source block at point to the kill ring."
  (interactive)
  (let ((code (amacs-render-code-at-point)))
    (unless code (user-error "Point is not in a source block"))
    (kill-new code)
    (message "Copied %d lines of code" (length (split-string code "\n" t)))))

(defun amacs-shell--history-file ()
  "Return the file of the shell's input history."
  (expand-file-name "shell-history" (amacs--home-directory)))

(defconst amacs-shell--history-separator "\0\n"
  "Between entries of the history file: an input of several lines stays one.")

(defvar-local amacs-shell--history-newest nil
  "The newest input already in the history file (an entry of the ring, by `eq').")

(defun amacs-shell--save-history ()
  "Append the inputs entered since the last save to the history file.
Each entry is followed by `amacs-shell--history-separator', as
`comint-write-input-ring' writes them, so RET costs one short append
however long the history; `amacs-shell--read-history' trims the file."
  (when (and (derived-mode-p 'amacs-shell-mode) comint-input-ring-file-name
             (ring-p comint-input-ring))
    (let* ((ring comint-input-ring) (len (ring-length ring)) (i 0) new)
      (while (and (< i len) (not (eq (ring-ref ring i) amacs-shell--history-newest)))
        (let* ((entry (ring-ref ring i)) (clean (amacs--scrub entry)))
          (unless (eq clean entry)     ; a pasted key stays out of the file (and of M-p)
            (aset (cddr ring) (ring-index i (car ring) (ring-length ring) (ring-size ring)) clean))
          (push clean new))             ; ends oldest first
        (setq i (1+ i)))
      (when new
        (with-file-modes #o700          ; private, as the server keeps the home: 0700, files 0600
          (make-directory (file-name-directory comint-input-ring-file-name) t)
          (let ((coding-system-for-write 'utf-8-unix))
            (if (and amacs-shell--history-newest (= i len))
                (amacs-shell--rewrite-history) ; the saved entry left the ring: write it whole
              (write-region (mapconcat (lambda (entry) (concat entry amacs-shell--history-separator))
                                       new "")
                            nil comint-input-ring-file-name 'append 'silent))))
        (setq amacs-shell--history-newest (ring-ref ring 0))))))

(defun amacs-shell--rewrite-history ()
  "Write the whole input ring to the history file."
  (let ((comint-input-ring-separator amacs-shell--history-separator)
        (coding-system-for-write 'utf-8-unix))
    (with-file-modes #o700 (comint-write-input-ring))))

(defun amacs-shell--read-history ()
  "Read the input history: its newest `comint-input-ring-size' entries.
A file from before entries were NUL-separated is read by line and
rewritten NUL-separated; one that appends made twice as long as the
ring is trimmed to it."
  (let* ((file comint-input-ring-file-name)
         (entries (and file (file-readable-p file)
                       (with-temp-buffer
                         (insert-file-contents file)
                         (cons (let ((n 0)) (while (search-forward "\0" nil t) (setq n (1+ n))) n)
                               (buffer-size)))))
         (comint-input-ring-separator (if (and entries (> (car entries) 0))
                                          amacs-shell--history-separator
                                        "\n")))
    ;; comint counts entries against the default size (in its temp buffer), not ours.
    (let ((default (default-value 'comint-input-ring-size)))
      (unwind-protect
          (progn (setq-default comint-input-ring-size comint-input-ring-size)
                 (comint-read-input-ring t))
        (setq-default comint-input-ring-size default)))
    (setq amacs-shell--history-newest (and (ring-p comint-input-ring)
                                           (> (ring-length comint-input-ring) 0)
                                           (ring-ref comint-input-ring 0)))
    (when (and entries (or (and (= (car entries) 0) (> (cdr entries) 0))
                           (> (car entries) (* 2 comint-input-ring-size))))
      (amacs-shell--rewrite-history))))

(defvar amacs-compose-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'amacs-compose-send)
    (define-key map (kbd "C-c C-k") #'amacs-compose-cancel)
    map)
  "Keymap of `amacs-compose-mode'.")

(define-derived-mode amacs-compose-mode text-mode "AMACS-Compose"
  "Write a long prompt for the agent; \\[amacs-compose-send] sends it.

\\{amacs-compose-mode-map}")

(defun amacs-compose (&optional initial)
  "Compose a long prompt in a buffer of its own, starting with INITIAL."
  (interactive)
  (pop-to-buffer (get-buffer-create "*amacs-compose*"))
  (unless (derived-mode-p 'amacs-compose-mode) (amacs-compose-mode))
  (when initial
    (erase-buffer)
    (insert initial))
  (setq header-line-format
        (substitute-command-keys "Prompt for the agent: \\<amacs-compose-mode-map>\\[amacs-compose-send] sends, \\[amacs-compose-cancel] cancels")))

(defun amacs-shell--send-text (text)
  "Send TEXT through the shell, as if typed at its prompt."
  (with-current-buffer (or (amacs-shell--buffer) (user-error "Open the shell first: M-x amacs-shell"))
    (goto-char (point-max))
    (comint-kill-input)
    (insert text)
    (comint-send-input)))

(defun amacs-compose-send ()
  "Send the composed prompt through the shell, as if typed there."
  (interactive)
  (let ((text (string-trim (buffer-substring-no-properties (point-min) (point-max))))
        (compose (current-buffer)))
    (when (string-empty-p text) (user-error "Nothing to send"))
    (amacs-shell--send-text text)
    (quit-window t (get-buffer-window compose))))

(defun amacs-compose-cancel ()
  "Throw the composed prompt away."
  (interactive)
  (quit-window t))

;;;; Context from your own Emacs

(defun amacs--src-language (mode)
  "The org source block language of major MODE, e.g. python for `python-mode'."
  (let ((name (string-remove-suffix "-mode" (symbol-name mode))))
    (cond ((string-suffix-p "-ts" name) (string-remove-suffix "-ts" name))
          ((equal name "lisp-interaction") "emacs-lisp")
          (t name))))

;;;###autoload (autoload 'amacs-send-region "amacs" "Send the region to the agent with a message." t)
(defun amacs-send-region (beg end message)
  "Send the text between BEG and END to the agent, quoted, with MESSAGE.
Code goes as an org source block in its buffer's language, prose as a
quote; both name where they came from."
  (interactive
   (if (use-region-p)
       (list (region-beginning) (region-end) (read-string "Message about the region: "))
     (user-error "Select a region first")))
  (let* ((text (string-trim-right (buffer-substring-no-properties beg end)))
         (where (format "%s, lines %d-%d" (or (and buffer-file-name (abbreviate-file-name buffer-file-name))
                                              (buffer-name))
                        (line-number-at-pos beg)
                        ;; A region that ends at the start of a line does not include that line.
                        (line-number-at-pos (if (and (> end beg) (save-excursion (goto-char end) (bolp)))
                                                (1- end)
                                              end))))
         (block (if (derived-mode-p 'prog-mode)
                    (format "#+begin_src %s\n%s\n#+end_src" (amacs--src-language major-mode) text)
                  (format "#+begin_quote\n%s\n#+end_quote" text))))
    (deactivate-mark)
    (amacs-shell--send-text (concat (string-trim message) (if (string-empty-p (string-trim message)) "" "\n\n")
                                    "From " where ":\n" block))
    (pop-to-buffer (amacs-shell--buffer))))

;;;###autoload (autoload 'amacs-add-buffer "amacs" "Add a buffer to the agent's active thread." t)
(defun amacs-add-buffer (&optional buffer)
  "Add BUFFER (default: the current one) to the agent's active thread.
The agent sees its contents from its next tick; a buffer
visiting a file is added by its file name."
  (interactive)
  (let* ((buffer (or buffer (current-buffer)))
         (name (with-current-buffer buffer
                 (if buffer-file-name (abbreviate-file-name buffer-file-name) (buffer-name)))))
    (when (eq buffer (amacs-shell--buffer)) (user-error "That is the shell itself"))
    (amacs-when-ready
     (lambda ()
       (amacs-call 'person_add_buffer (list name)
                   (lambda (answer)
                     (amacs-shell--note (format "Added %s to thread %s: the agent sees it from its next tick."
                                                name (plist-get answer :thread)))
                     (message "AMACS: added %s to thread %s" name (plist-get answer :thread)))
                   (lambda (err) (amacs-shell--note (concat "Could not add " name ": " err))))))))

(defun amacs-shell--go-on-p (what then)
  "Return non-nil when the person may WHAT now.
At once when the agent is not working on a turn; else if the person
answers yes to \"AMACS is working on your turn; WHAT anyway (THEN)?\"."
  (or (not amacs-shell-busy)
      (not (amacs-live-p))
      (yes-or-no-p (format "AMACS is working on your turn; %s anyway (%s)? " what then))))

(defun amacs-shell--query-kill ()
  "Ask before the shell buffer is killed while the agent works on a turn.
On the shell's `kill-buffer-query-functions': the turn goes on without
the shell, and its reply is seen only in agent-chat.org, or in the last
exchanges \[amacs-shell] shows in a new shell."
  (amacs-shell--go-on-p "kill the shell" "the turn goes on; M-x amacs-shell shows it"))

(defun amacs-shell--forget-buffer ()
  "Forget the stream of the shell buffer being killed: its markers go with it.
Its turn's timers stop.  Events of the turn still coming find no shell
and do nothing; a new shell starts clean."
  (setq amacs-shell--stream-start nil amacs-shell--stream-end nil)
  (let ((turn amacs-shell--turn-of-buffer))
    (when turn
      (dolist (timer (list (amacs-shell-turn-clock turn) (amacs-shell-turn-wait-timer turn)))
        (when timer (cancel-timer timer))))))

(defun amacs-shell--query-quit ()
  "Ask before Emacs quits while the agent works on a turn; non-nil to quit.
On `kill-emacs-query-functions', as Emacs asks about live processes:
quitting stops the turn (the person's input is saved, the reply that
was coming is not)."
  (amacs-shell--go-on-p "quit" "your input is saved"))

;;;; The mode

(defvar amacs-shell-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'amacs-shell-return)
    ;; As in ielm: C-j sends too.  Enter typed ahead while Emacs starts reaches
    ;; it through the terminal's cooked mode as C-j, and must not be lost.
    (define-key map (kbd "C-j") #'comint-send-input)
    (define-key map (kbd "S-<return>") #'amacs-shell-newline)
    (define-key map (kbd "TAB") #'amacs-shell-tab)
    (define-key map (kbd "<backtab>") #'amacs-shell-previous-eval)
    (define-key map (kbd "C-c C-e") #'amacs-compose)
    (define-key map (kbd "C-c C-c") #'amacs-shell-interrupt)
    ;; The hub: C-c C-v, "view the agent's mind".  Not C-c C-h, which is the
    ;; help for the C-c prefix; not C-c C-a (comint's beginning of input, and
    ;; screen's prefix) nor C-c C-b (tmux's prefix).
    (define-key map (kbd "C-c C-v") #'amacs-hub)
    (define-key map (kbd "C-c C-l") #'amacs-open-chat-log)
    (define-key map (kbd "C-c C-w") #'amacs-shell-copy-code)
    (define-key map (kbd "C-c M-w") #'amacs-shell-copy-reply)
    ;; comint's own stop wherever text is not an output field: on eval lines too.
    (define-key map [remap comint-previous-prompt] #'amacs-shell-previous-prompt)
    (define-key map [remap comint-next-prompt] #'amacs-shell-next-prompt)
    ;; comint's C-d at the end sends EOF, which ended the shell's placeholder
    ;; process and with it the shell; C-c C-z would stop it.
    (define-key map (kbd "C-d") #'delete-char)
    (define-key map (kbd "C-c C-z") #'undefined)
    ;; comint's keys and Signals menu for a subprocess: there is none here, and
    ;; C-c C-d's EOF would end the placeholder process and with it the shell.
    (dolist (command '(comint-send-eof comint-quit-subjob comint-stop-subjob comint-kill-subjob
                       comint-continue-subjob comint-interrupt-subjob))
      (define-key map (vector 'remap command) #'amacs-shell-no-subprocess))
    map)
  "Keymap of `amacs-shell-mode'.")

(define-derived-mode amacs-shell-mode comint-mode "AMACS"
  "The AMACS shell: talk to the agent, which works in this Emacs.
Type at the prompt and press \\[amacs-shell-return] to send (\\[amacs-shell-newline] for a new line,
\\[amacs-compose] to write a long prompt in a buffer of its own).  Input
sent while the agent works waits, shown as queued, until it takes it;
\\[amacs-shell-interrupt] interrupts its turn, \\[keyboard-quit] stops an eval that runs.

Above the prompt everything is the conversation, read-only: replies
in org, notes (;;), and a line (▸ eval …) for each form the agent
evaluated.  \\[amacs-shell-tab] or \\[amacs-shell-return] on such a line shows its form and
result; elsewhere \\[amacs-shell-tab] goes to the next one, \\[amacs-shell-previous-eval] to the one before.
\\[amacs-shell-return] on a past input puts it at the prompt to send again;
\\[amacs-shell-previous-prompt] and \\[amacs-shell-next-prompt] go from input to input, \\[comint-previous-input]
brings back earlier inputs (kept across sessions).

\\[amacs-hub] opens the hub (the agent's state and its subagents),
\\[amacs-open-chat-log] the chat log (agent-chat.org), \\[amacs-shell-copy-reply] copies the last reply
and \\[amacs-shell-copy-code] the source block at point.  The header line says what the
agent is doing, the mode line what this session cost.

\\{amacs-shell-mode-map}"
  (setq comint-prompt-regexp (concat "^" (regexp-quote amacs-shell-prompt)))
  ;; The shell is no command shell: once shell.el is loaded its directory
  ;; tracking is on in every buffer (its default), and C-h m listed it here.
  (setq-local shell-dirtrackp nil)
  (setq amacs-shell--turn-of-buffer (amacs-shell--new-turn))
  (setq-local paragraph-separate "\\'")
  (setq-local paragraph-start comint-prompt-regexp)
  (setq-local comint-input-sender #'amacs-shell--input-sender)
  (setq-local comint-process-echoes nil)
  (setq-local comint-prompt-read-only t)
  ;; Typing or yanking in the read-only output goes to the input at the end, not lost.
  (setq-local comint-scroll-to-bottom-on-input 'this)
  (setq-local comint-use-prompt-regexp nil)
  (setq-local comint-input-ring-file-name (amacs-shell--history-file))
  (setq-local comint-input-ring-size amacs-shell-history-size)
  (setq-local comint-input-ignoredups t)
  (setq-local header-line-format '(:eval (amacs-shell-header-line)))
  ;; A window whose point follows the output scrolls as little as shows that point,
  ;; in redisplay itself: a layout of our own per redisplay
  ;; (`pos-visible-in-window-p', `recenter') cost 2-3 ms a frame.
  (setq-local scroll-conservatively 101)
  (setq-local comint-output-filter-functions nil) ; RET: comint's scroll-to-bottom walks every window
  (setq-local mode-line-format amacs-shell-mode-line)
  (setq-local word-wrap t)
  (amacs-render-prepare-buffer)
  (amacs-shell--read-history)
  (add-hook 'kill-buffer-hook #'amacs-shell--save-history-safely nil t)
  (add-hook 'kill-buffer-hook #'amacs-shell--forget-buffer nil t)
  (add-hook 'kill-buffer-query-functions #'amacs-shell--query-kill nil t)
  (add-hook 'kill-emacs-hook #'amacs-shell--save-history-everywhere)
  (add-hook 'kill-emacs-query-functions #'amacs-shell--query-quit)
  (unless (comint-check-proc (current-buffer))
    (amacs-shell--start-placeholder)
    (let ((inhibit-read-only t))
      (goto-char (point-max))
      (setq amacs-shell--out (copy-marker (point) t)
            amacs-shell--prompt-start (copy-marker (point) t))
      (amacs-shell--insert-prompt))))

(defun amacs-shell--start-placeholder ()
  "Give the shell the process comint needs; the agent is not a subprocess.
Its sentinel writes nothing: comint's wrote \"Process amacs-shell finished\"."
  (let ((proc (condition-case nil
                  (start-process "amacs-shell" (current-buffer) "hexl")
                (file-error (start-process "amacs-shell" (current-buffer) "cat")))))
    (set-process-query-on-exit-flag proc nil)
    (set-process-sentinel proc #'ignore)
    proc))

(defun amacs-shell--revive ()
  "Start the placeholder process again if it has gone.
The input at the prompt stays."
  (when (and (derived-mode-p 'amacs-shell-mode) (not (comint-check-proc (current-buffer))))
    (set-marker (process-mark (amacs-shell--start-placeholder))
                (min (point-max) (+ amacs-shell--prompt-start (length amacs-shell-prompt))))))

(defun amacs-shell-no-subprocess ()
  "Say that the shell has no subprocess to signal, and what stops the agent."
  (interactive)
  (message "%s" (substitute-command-keys
                 "The AMACS shell runs no subprocess: \\<amacs-shell-mode-map>\\[amacs-shell-interrupt] interrupts the agent")))

;;;###autoload
(defun amacs-shell ()
  "Open `*amacs-shell*' and start the AMACS server if needed."
  (interactive)
  ;; The server first: its start-up (Python's imports) overlaps loading the rest
  ;; of the client and making the shell.  A start that fails
  ;; at once is tried again by `amacs-when-ready' below, which says why in the shell.
  (amacs-start-server)                  ; nothing when a server is live or starting
  (require 'amacs)                      ; reached by autoload: the agent API and buffer reads too
  (let ((buf (get-buffer-create amacs-shell-buffer-name)))
    (with-current-buffer buf
      (if (derived-mode-p 'amacs-shell-mode)
          (amacs-shell--revive)
        (amacs-shell-mode)
        ;; A new shell on a live server (the last one was killed): its hello was
        ;; long ago, so ask for the last exchanges now.  A turn going on streams
        ;; below them: its events wait until they are shown.
        (when (amacs-live-p)
          (amacs-hold-events)
          (amacs-call 'status nil
                      (lambda (status)
                        (setq amacs--status (append status amacs--status))
                        ;; Mid-turn, the last input has no reply yet: not a stopped server's.
                        (let ((amacs-shell--stop-said amacs-shell-busy))
                          (amacs-shell--greet))
                        (amacs-release-events))
                      (lambda (err)
                        (amacs-release-events)
                        (amacs-shell--note (concat "Could not show the last exchanges: " err)))))))
    (setq amacs-transport-message-function #'amacs-shell--note)
    (pop-to-buffer-same-window buf)
    (unless (amacs-live-p) (amacs-shell--transition 'opened))
    (amacs-render-preload)
    (amacs-when-ready #'ignore)
    buf))

(provide 'amacs-shell)
;;; amacs-shell.el ends here
