;;; amacs-shell-stream.el --- The AMACS shell's streamed replies, thinking and eval lines -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; What the agent produces, drawn where it happens in the shell's output:
;; the reply as it streams, the model's thinking folded above it, and a
;; one-line summary of each eval and tool call that TAB unfolds.
;;
;; A streamed reply is a region of its own.  When the reply is complete it
;; is replaced by its org rendering; when the turn fails, the server goes,
;; or the person interrupts, what streamed is marked as discarded.  Nothing
;; outside that region is ever deleted.

;;; Code:

(require 'amacs-eval)
(require 'amacs-render)
(require 'amacs-shell-output)
(require 'amacs-shell-header)
(declare-function amacs-shell--shown-reply "amacs-shell" (text &optional after))

;;;; Streaming replies

(defvar-local amacs-shell--last-reply nil
  "The text of the agent's last reply, for `amacs-shell-copy-reply'.")

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
  (when (amacs-shell--get 'amacs-shell--stream-start)
    (amacs-shell--editing
      (let ((region (amacs-shell--stream-close)))
        (add-text-properties (car region) (cdr region)
                             '(font-lock-face amacs-shell-abandoned))))
    (amacs-shell--output (format ";; (the agent keeps none of the text above: %s)" reason)
                         'amacs-shell-annotation)))

(defun amacs-shell--on-reply-abandon (event)
  "Mark the streamed text as not the reply, for the reason in EVENT."
  (amacs-shell--discard-stream (plist-get event :reason)))

(defun amacs-shell--on-reply (event)
  "Show the reply in EVENT rendered as org, set off by blank lines.
A streamed reply's region is replaced by the rendering.  Before org is
loaded it is shown plain and rendered once org is (the first answer
after a start does not wait for org: `amacs-shell--shown-reply')."
  (let* ((text (string-trim (or (plist-get event :text) "")))
         (shown (amacs-shell--shown-reply text)))
    (amacs-shell--set 'amacs-shell--last-reply text)
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

(defcustom amacs-shell-eval-preview-chars 60
  "Most characters of an eval's form shown on its one-line summary.
The summary never gets wider than the shell's window."
  :type 'integer
  :group 'amacs)

(defvar-local amacs-shell--evals nil
  "The primary's evals whose lines wait for a result: (EVAL-ID . LINE-ID) each.
EVAL-ID is the server's id of the eval (its event's :id).  An eval may
wait (an agent call, a redisplay) and another connection's eval run
inside it: each finds its own line by its id.")

(defvar amacs-shell--eval-count 0
  "Evals shown so far; names each one's invisibility symbol.")

(defun amacs-shell--eval-start (event)
  "Show the eval in EVENT as a summary line that `amacs-shell-toggle' expands.
The details (form, then result) are hidden from the end of the summary
to just before the line's newline, as outline folding hides a body, so
the next line shows as it would without them."
  (let ((agent (or (plist-get event :agent) "primary")))
    (amacs-shell--transition 'eval-start agent)
    (if (not (equal agent "primary"))
        (amacs-shell--agent-doing agent (concat "eval " (amacs-shell--one-line (plist-get event :form) 40)))
      (let ((line (amacs-shell--eval-line (plist-get event :form))))
        (amacs-shell--set 'amacs-shell--evals
                          (cons (cons (plist-get event :id) line) (amacs-shell--get 'amacs-shell--evals))))))
  (amacs-shell--show-now))

(defun amacs-shell--eval-head (form width)
  "Return the start of the line of an eval of FORM (text), in WIDTH columns."
  (concat "▸ eval " (amacs-shell--one-line (amacs-shell--for-person form)
                                           (min amacs-shell-eval-preview-chars (- width 25)))))

(defun amacs-shell--eval-summary (form value width)
  "Return the line of an eval of FORM with result VALUE, in WIDTH columns."
  (let ((head (amacs-shell--eval-head form width)))
    (concat head " → " (amacs-shell--one-line value (max 10 (- width 3 (length head)))))))

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
         (propertize (amacs-shell--eval-head form (amacs-shell--width))
                     'font-lock-face 'amacs-shell-eval 'amacs-eval id 'amacs-shell-form form
                     'help-echo "TAB or RET: show the form and its result"))
        (put id 'amacs-pending (copy-marker amacs-shell--out nil))
        (amacs-shell--insert-output (propertize (substitute-command-keys " … (\\[keyboard-quit] stops it)")
                                                'font-lock-face 'amacs-shell-eval 'amacs-eval id))
        (amacs-shell--insert-output (amacs-shell--eval-detail id (amacs-shell--for-person (amacs-shell--pretty form))
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
      (let ((line (assoc (plist-get event :id) (amacs-shell--get 'amacs-shell--evals))))
        (when line
          (amacs-shell--set 'amacs-shell--evals (delq line (amacs-shell--get 'amacs-shell--evals)))
          (amacs-shell--eval-finish (cdr line) result))))
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
         (error (amacs-shell--for-person (or (plist-get result :error) "?")))
         (value (if ok (amacs-shell--for-person (or (plist-get result :result) "nil"))
                  (concat "error: " error))))
    (when (and start (marker-buffer start))
      (amacs-shell--editing
        (goto-char details-end)
        (insert (amacs-shell--output-props
                 (amacs-shell--eval-detail
                  id (concat (if ok "⇒ " "error: ") (string-trim-right (if ok value error)))
                  (if ok 'default 'amacs-shell-error))))
        (let* ((pending (get id 'amacs-pending))
               (used (- pending start)))
          (goto-char pending)
          (delete-region pending (next-single-property-change pending 'invisible nil (point-max)))
          (insert (amacs-shell--output-props
                   (concat " → " (amacs-shell--one-line value (max 10 (- (amacs-shell--width) 3 used))))))
          (add-text-properties start (point)
                               (list 'font-lock-face face 'amacs-eval id
                                     'amacs-shell-fit (apply-partially #'amacs-shell--eval-summary
                                                                       (get-text-property start 'amacs-shell-form)
                                                                       value)))
          (set-marker pending nil)
          (put id 'amacs-pending nil)))
      (set-marker start nil)
      (set-marker details-end nil)
      (put id 'amacs-summary nil)
      (put id 'amacs-details-end nil))))

(defvar amacs-shell--tool-count 0
  "Tool calls shown so far; names each one's invisibility symbol.")

(defun amacs-shell--tool-summary (name shown width)
  "Return the line of a call of tool NAME with result SHOWN, in WIDTH columns."
  (format "▸ tool %s → %s" name (amacs-shell--one-line shown (max 10 (- width 14 (length name))))))

(defvar-local amacs-shell--fitted-width nil
  "The width in columns the shell's eval and tool lines were last fitted to.")

(defun amacs-shell--refit (window)
  "Fit the eval and tool lines of WINDOW's shell to its width, if that changed.
On `window-size-change-functions' in the shell: a line cut for a wide
window wrapped over two or three in a narrow one (the shell beside a
fork's).  Each such line carries `amacs-shell-fit', a function of the
width that returns it; its arrow (▸ folded, ▾ shown) is kept."
  (with-current-buffer (window-buffer window)
    (let ((width (amacs-shell--width)))
      (unless (eql width amacs-shell--fitted-width)
        (setq amacs-shell--fitted-width width)
        (amacs-shell--editing
          (let ((pos (point-min)))
            (while (setq pos (text-property-not-all pos (point-max) 'amacs-shell-fit nil))
              (let* ((end (next-single-property-change pos 'amacs-shell-fit nil (point-max)))
                     (fitted (funcall (get-text-property pos 'amacs-shell-fit) width))
                     (text (concat (buffer-substring-no-properties pos (1+ pos)) (substring fitted 1))))
                (if (equal text (buffer-substring-no-properties pos end))
                    (setq pos end)
                  (let ((props (text-properties-at pos)))
                    (goto-char pos)
                    (delete-region pos end)
                    (insert (apply #'propertize text props))
                    (setq pos (point))))))))))))

(defun amacs-shell--tool-line (name arguments value error seconds)
  "Show a tool call of the primary's eval on its own line under the eval line.
NAME, ARGUMENTS, VALUE, ERROR and SECONDS are as
`amacs-tool-call-functions' gives them; \\[amacs-shell-toggle] shows
its arguments and its whole result."
  (when (equal (amacs-shell-turn-eval-agent (amacs-shell--turn)) "primary")
    (let ((id (intern (format "amacs-tool-%d" (setq amacs-shell--tool-count (1+ amacs-shell--tool-count)))))
          (shown (amacs-shell--for-person (if error (concat "error: " error) (amacs--print-result value))))
          (face (if error 'amacs-shell-eval-error 'amacs-shell-eval)))
      (amacs-shell--editing
        (add-to-invisibility-spec id)
        (amacs-shell--fresh-line)
        (amacs-shell--insert-output
         (concat (propertize (amacs-shell--tool-summary name shown (amacs-shell--width))
                             'font-lock-face face 'amacs-eval id 'line-prefix "  "
                             'amacs-shell-fit (apply-partially #'amacs-shell--tool-summary name shown)
                             'help-echo "TAB or RET: show its arguments and result")
                 (amacs-shell--eval-detail id (format "arguments: %S (%.2f s)" arguments seconds)
                                           'font-lock-constant-face)
                 (amacs-shell--eval-detail id (concat (if error "" "⇒ ") shown)
                                           (if error 'amacs-shell-error 'default))
                 (propertize "\n" 'amacs-eval id)))))))

;;;; Forms printed as code is written

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

;;;; Folding and moving between eval lines

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

(provide 'amacs-shell-stream)
;;; amacs-shell-stream.el ends here
