;;; amacs-shell-output.el --- The AMACS shell's buffer: output, footer, prompt -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The shell buffer is always laid out the same way:
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
;; This file holds that layout and the writes to it
;; (`amacs-shell--editing'); what is written there comes from
;; amacs-shell-stream.el (replies, thinking, evals) and amacs-shell.el
;; (notes, events).

;;; Code:

(require 'cl-lib)
(require 'amacs-transport)

;;;; Settings and faces

(defcustom amacs-shell-prompt "amacs> "
  "Prompt of the AMACS shell."
  :type 'string
  :group 'amacs)

(defcustom amacs-shell-buffer-name "*amacs-shell*"
  "Name of the AMACS shell buffer."
  :type 'string
  :group 'amacs)

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

;;;; The buffer: output, footer, prompt

(defun amacs-shell--width ()
  "Columns available in the shell's window (80 without one)."
  (let ((window (get-buffer-window (or (amacs-shell--buffer) (current-buffer)) t)))
    (max 40 (1- (if window (window-body-width window) 80)))))

(defvar-local amacs-shell--out nil
  "Marker where output goes: the end of the output, the start of the footer.")

(defvar-local amacs-shell--prompt-start nil
  "Marker at the start of the prompt (the process mark is at its end).")

(defvar-local amacs-shell--stream-start nil
  "Marker where the reply being streamed starts, or nil.")

(defvar-local amacs-shell--stream-end nil
  "Marker where the reply being streamed ends, or nil.")

(defun amacs-shell--buffer ()
  "Return the live shell buffer of the current connection, or nil.
Each connection (each AMACS home) has at most one shell."
  (let ((buf (amacs-ui-shell (amacs-connection-ui (amacs-current-connection)))))
    (and (buffer-live-p buf)
         (with-current-buffer buf (derived-mode-p 'amacs-shell-mode))
         buf)))

(defun amacs-shell--get (variable)
  "The value of VARIABLE, one of the shell's own, in the connection's shell.
The current connection's; nil without a shell."
  (let ((buf (amacs-shell--buffer)))
    (and buf (buffer-local-value variable buf))))

(defun amacs-shell--set (variable value)
  "Set VARIABLE, one of the shell's own, to VALUE in the connection's shell.
The current connection's; nothing without a shell."
  (let ((buf (amacs-shell--buffer)))
    (when buf (with-current-buffer buf (set variable value)))))

(defun amacs-shell--buffer-name (connection)
  "The name of CONNECTION's shell buffer.
That of the home `amacs-home' names is `amacs-shell-buffer-name'; any
other's says its home."
  (amacs-connection-buffer-name connection "shell" amacs-shell-buffer-name))

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

(defun amacs-shell--for-person (text)
  "Return TEXT with each memory item's address shown without its <EOT>s.
An address, <EOT>AGENT:BRAIN:NAME:VERSION<EOT>, is written so for the
agent, which passes it back in its evals; the person reads
AGENT:BRAIN:NAME:VERSION."
  (if (string-search "<EOT>" text)
      (replace-regexp-in-string "<EOT>\\([^<\n]*?\\)<EOT>" "\\1" text t)
    text))

(defun amacs-shell--one-line (text limit)
  "TEXT on one line, cut to LIMIT characters."
  (truncate-string-to-width (string-trim (replace-regexp-in-string "[ \t\n]+" " " text))
                            limit nil nil "…"))

(defun amacs-shell--update-header (&optional buffer)
  "Redraw the header line (and mode line) of BUFFER, by default the shell."
  (let ((buf (or buffer (amacs-shell--buffer))))
    (when (buffer-live-p buf)
      (with-current-buffer buf (force-mode-line-update)))))

;;;; The person's inputs, past and at the prompt

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

;;;; Footer: working subagents and queued input

(defvar-local amacs-shell--agents nil
  "The subagents at work, as the server last reported them.")

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
    (let* ((shown (butlast amacs-shell--agents (- (length amacs-shell--agents) amacs-shell-agent-lines)))
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

(defun amacs-shell--agent-doing (agent doing)
  "Show that AGENT is DOING something (nil: back to its reported state)."
  (let* ((agents (amacs-shell--get 'amacs-shell--agents))
         (entry (cl-find-if (lambda (a) (equal (plist-get a :id) agent)) agents)))
    (when entry
      (amacs-shell--set 'amacs-shell--agents
                        (mapcar (lambda (a) (if (eq a entry) (plist-put (copy-sequence a) :doing doing) a))
                                agents))
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

(defun amacs-shell--queued-inputs ()
  "The inputs queued in the footer and not yet taken, oldest first."
  (let ((region (amacs-shell--footer-lines 'amacs-queued)) inputs)
    (when region
      (let ((pos (car region)))
        (while (< pos (cdr region))
          (let ((end (next-single-property-change pos 'amacs-queued nil (cdr region))))
            (when (get-text-property pos 'amacs-queued)
              (push (string-remove-suffix
                     "\n" (string-remove-prefix amacs-shell-prompt (buffer-substring-no-properties pos end)))
                    inputs))
            (setq pos end)))))
    (nreverse inputs)))

(defun amacs-shell--mark-sent (id)
  "Mark queued entry ID as handed to the server (not just waiting for one)."
  (amacs-shell--editing
    (let ((region (amacs-shell--footer-lines 'amacs-queued)) pos)
      (when region
        (setq pos (text-property-any (car region) (cdr region) 'amacs-queued id))
        (when pos
          (put-text-property pos (next-single-property-change pos 'amacs-queued nil (cdr region))
                             'amacs-sent t))))))

(defun amacs-shell--take-queued (&optional face note sent id)
  "Move the oldest queued input into the output, in FACE; then NOTE, if any.
SENT: only if it was handed to a server (t) or only if not (`waiting').
ID: the queued entry ID (`amacs-shell--queue'), not the oldest.
Return its line (the prompt and the input) if there was one."
  (amacs-shell--editing
    (let* ((region (amacs-shell--footer-lines 'amacs-queued))
           (start (and region (if id
                                  (text-property-any (car region) (cdr region) 'amacs-queued id)
                                (car region)))))
      (when (and start (pcase sent
                         ('t (get-text-property start 'amacs-sent))
                         ('waiting (not (get-text-property start 'amacs-sent)))
                         (_ t)))
        ;; An entry is a run of one `amacs-queued' value: an input of several lines moves whole.
        (let* ((end (next-single-property-change start 'amacs-queued nil (cdr region)))
               (line (buffer-substring-no-properties start end)))
          (delete-region start end)
          (amacs-shell--fresh-line)
          (amacs-shell--insert-output (amacs-shell--input-line line face))
          (when note (amacs-shell--insert-output (propertize (concat note "\n") 'font-lock-face face)))
          line)))))

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

(provide 'amacs-shell-output)
;;; amacs-shell-output.el ends here
