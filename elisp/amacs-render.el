;;; amacs-render.el --- Replies shown as org, with org's own font-lock -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The agent writes its replies in org markup (the server turns Markdown
;; into org before a reply is shown or stored), and the shell shows them
;; as org shows them: the text is fontified by `org-mode' itself in a
;; work buffer, source blocks in their own language's mode
;; (`org-src-fontify-natively'), and the faces are copied onto the
;; shell's text as `font-lock-face', which the shell's own font-lock
;; leaves alone.  No highlighter of our own: what org draws is what you
;; see.  The text itself stays plain, so copying it copies org.

;;; Code:

(require 'subr-x)

(defvar org-src-fontify-natively)
(defvar org-hide-emphasis-markers)
(defvar org-mode-hook)
(declare-function org-mode "org")

(defcustom amacs-render-org t
  "Whether replies are shown with org's fontification.
nil shows them as plain text."
  :type 'boolean
  :group 'amacs)

(defcustom amacs-render-hide-emphasis-markers t
  "Whether the markers of org emphasis (*bold*, /italic/, ~code~) are hidden.
The text keeps them: copying a reply copies its org markup."
  :type 'boolean
  :group 'amacs)

(defconst amacs--render-buffer " *amacs-org-render*"
  "Work buffer where replies are fontified by `org-mode'.")

(defconst amacs--render-properties '(face invisible)
  "Text properties copied from the org work buffer onto the shell's text.
`face' becomes `font-lock-face'.")

(defun amacs--render-work-buffer ()
  "Return the org work buffer, creating it in `org-mode' once."
  (or (get-buffer amacs--render-buffer)
      (with-current-buffer (get-buffer-create amacs--render-buffer)
        (require 'org)
        (let ((org-mode-hook nil))
          (org-mode))
        (setq-local org-src-fontify-natively t)
        (current-buffer))))

(defun amacs-render-org (text)
  "Return TEXT (org markup) fontified as `org-mode' fontifies it.
Faces are carried as `font-lock-face'; link brackets and other text org
hides carry `invisible' (add `org-link' to the shell's invisibility spec)."
  (if (or (not amacs-render-org) (string-empty-p text))
      text
    (with-current-buffer (amacs--render-work-buffer)
      (let ((inhibit-read-only t)
            (inhibit-modification-hooks nil))
        (erase-buffer)
        (setq-local org-hide-emphasis-markers amacs-render-hide-emphasis-markers)
        (insert text)
        (condition-case err
            (font-lock-ensure)
          (error (message "AMACS: org could not fontify a reply: %s" (error-message-string err))))
        (let ((out (substring-no-properties (buffer-string))))
          (dolist (prop amacs--render-properties)
            (let ((pos (point-min)))
              (while (< pos (point-max))
                (let ((next (next-single-property-change pos prop nil (point-max)))
                      (value (get-text-property pos prop)))
                  (when value
                    (put-text-property (1- pos) (1- next)
                                       (if (eq prop 'face) 'font-lock-face prop)
                                       value out))
                  (setq pos next)))))
          out)))))

(defun amacs-render-prepare-buffer ()
  "Set up the current buffer to show rendered org: hidden link brackets."
  (add-to-invisibility-spec 'org-link))

;;;; Before org is loaded: org's look, drawn by a few regexps

;; The first answer after a start does not wait for org (it loads a piece
;; at each idle moment, a second or more).  Until then a reply is drawn
;; by `amacs-render-quick': the markup org draws most (headlines, tables,
;; blocks, links, emphasis, checkboxes) found by org's own regexps and
;; given the faces org's faces come to, its markers hidden as org hides
;; them.  So the text reads as it will, and org's drawing, when it comes,
;; changes little: code in source blocks gets its language's colours.

(defface amacs-render-table
  '((((class color) (min-colors 88) (background light)) (:foreground "Blue1"))
    (((class color) (min-colors 88) (background dark)) (:foreground "LightSkyBlue"))
    (((class color) (min-colors 16) (background light)) (:foreground "Blue"))
    (((class color) (min-colors 16) (background dark)) (:foreground "LightSkyBlue"))
    (((class color) (min-colors 8) (background light)) (:foreground "blue"))
    (((class color) (min-colors 8) (background dark))))
  "A table of a reply drawn before org is loaded: as `org-table' looks."
  :group 'amacs)

(defconst amacs--render-quick-levels
  [font-lock-function-name-face font-lock-variable-name-face font-lock-keyword-face
   font-lock-comment-face font-lock-type-face font-lock-constant-face
   font-lock-builtin-face font-lock-string-face]
  "The faces `org-level-1' to `org-level-8' come to (through `outline-1' to 8).")

(defconst amacs--render-quick-emphasis
  '((?* . bold) (?/ . italic) (?_ . underline) (?= . shadow) (?~ . shadow)
    (?+ . (:strike-through t)))
  "Each emphasis marker and its face as org draws it.
`org-verbatim' and `org-code' inherit `shadow'.")

(defconst amacs--render-quick-emphasis-re
  (concat "\\([-[:space:]('\"{]\\|^\\)"
          "\\(\\([*/_+=~]\\)"
          "\\([^[:space:]]\\|[^[:space:]].*?\\(?:\n.*?\\)\\{0,1\\}[^[:space:]]\\)"
          "\\3\\)"
          "\\([-[:space:].,:!?;'\")}\\[]\\|$\\)")
  "Emphasis as `org-emph-re' and `org-verbatim-re' find it (org 9.5, its defaults).
Group 2 is the whole, 3 the marker, 4 the text, 5 what follows.")

(defconst amacs--render-quick-paragraph-re
  "\n\\(?:\\*+ \\|[ \t]*\\(?:$\\||\\|#\\|[-+*]\\(?:[ \t]\\|$\\)\\|[0-9]+[.)]\\(?:[ \t]\\|$\\)\\)\\)"
  "A line that starts another paragraph: emphasis does not reach over it.")

(defconst amacs--render-quick-link-re
  (concat "\\[\\[\\([^][\n]+\\)\\]\\(?:\\[\\([^][\n]+\\)\\]\\)?\\]"
          "\\|\\<\\(?:https?\\|ftp\\|file\\|mailto\\):"
          "[^][ \t\n()<>]*\\(?:[^][[:punct:] \t\n()<>]\\|/\\)")
  "A bracket link (group 1 its target, 2 its description) or a plain one.")

(defun amacs--render-quick-prepend (beg end face)
  "Put FACE before the faces the text from BEG to END has, as org's emphasis does."
  (while (< beg end)
    (let ((next (next-single-property-change beg 'font-lock-face nil end))
          (old (get-text-property beg 'font-lock-face)))
      (put-text-property beg next 'font-lock-face
                         (cons face (cond ((null old) nil)
                                          ((and (consp old) (not (keywordp (car old)))) old)
                                          (t (list old)))))
      (setq beg next))))

(defun amacs--render-quick-lines ()
  "Draw the current buffer's line markup: headlines, tables, blocks, list items.
The text of a source, example or export block is marked
`amacs--render-verbatim': nothing inside it is markup."
  (goto-char (point-min))
  (let ((case-fold-search t) (block nil))
    (while (not (eobp))
      (let ((bol (point)) (next (min (1+ (line-end-position)) (point-max))))
        (cond
         (block
          (if (looking-at "[ \t]*#\\+end_")
              (progn (put-text-property bol next 'font-lock-face 'font-lock-comment-face)
                     (setq block nil))
            (when (eq block 'verbatim)
              (add-text-properties bol next '(font-lock-face shadow amacs--render-verbatim t)))))
         ((looking-at "[ \t]*#\\+begin_\\(\\S-+\\)")
          (put-text-property bol next 'font-lock-face 'font-lock-comment-face)
          (setq block (if (member (downcase (match-string 1)) '("src" "example" "export"))
                          'verbatim
                        'other)))
         ((looking-at "\\*+ ")
          (put-text-property bol (line-end-position) 'font-lock-face
                             (aref amacs--render-quick-levels
                                   (% (- (match-end 0) bol 2) (length amacs--render-quick-levels)))))
         ((looking-at "[ \t]*\\(\\(?:|\\|\\+-[-+]\\).*\\S-\\)")
          (put-text-property (match-beginning 1) (match-end 1) 'font-lock-face 'amacs-render-table))
         ((looking-at "[ \t]*#\\(?:[+ ]\\|$\\)")
          (put-text-property bol (line-end-position) 'font-lock-face 'font-lock-comment-face))
         ((looking-at (concat "[ \t]*\\(?:[-+*]\\|[0-9]+[.)]\\)[ \t]+"
                              "\\(\\[[- X]\\]\\)?\\(?:[ \t]*\\(.*?[ \t]+::\\)\\(?:[ \t]\\|$\\)\\)?"))
          (when (match-beginning 1)
            (put-text-property (match-beginning 1) (match-end 1) 'font-lock-face '(bold)))
          (when (and (match-beginning 2) (not (memq (char-after bol) '(?+ ?*))) ; a term: - only
                     (save-excursion (goto-char bol) (looking-at-p "[ \t]*-")))
            (put-text-property (match-beginning 2) (match-end 2) 'font-lock-face '(bold)))))
        (goto-char next)))))

(defun amacs--render-quick-links ()
  "Draw the current buffer's links as org does: brackets and targets hidden."
  (goto-char (point-min))
  (while (re-search-forward amacs--render-quick-link-re nil t)
    (let ((beg (match-beginning 0)) (end (match-end 0)))
      (unless (text-property-not-all beg end 'amacs--render-verbatim nil)
        (add-text-properties beg end '(font-lock-face link amacs--render-link t))
        (when (match-beginning 1)
          (let ((shown (or (match-beginning 2) (match-beginning 1))))
            (put-text-property beg shown 'invisible 'org-link)
            (put-text-property (- end 2) end 'invisible 'org-link)))))))

(defun amacs--render-quick-emphasis (hide)
  "Draw the current buffer's emphasis as `org-do-emphasis-faces' does.
HIDE non-nil hides the markers."
  (goto-char (point-min))
  (while (re-search-forward "\\([-[:space:]('\"{]\\|^\\)\\([~=*/_+]\\)" nil t)
    (let ((marker (char-after (match-beginning 2)))
          (after (match-end 0)))
      (goto-char (match-beginning 0))
      (when (and (not (and (eq marker ?+)
                           (save-excursion (beginning-of-line)
                                           (looking-at-p "[ \t]*\\(|[-+]+|?\\|\\+[-+]+\\+\\)[ \t]*$"))))
                 ;; Not a headline's stars, nor closed by them.
                 (not (and (eq marker ?*)
                           (save-excursion (goto-char (1+ (match-beginning 2)))
                                           (skip-chars-backward "*")
                                           (and (bolp) (looking-at-p "\\*+ ")))))
                 (looking-at amacs--render-quick-emphasis-re)
                 (not (string-match-p amacs--render-quick-paragraph-re (match-string 2)))
                 (not (and (save-excursion (beginning-of-line) (looking-at-p "[ \t]*|"))
                           (string-match-p "|" (match-string 4))))
                 (not (text-property-not-all (match-beginning 2) (match-end 2)
                                             'amacs--render-verbatim nil))
                 (not (text-property-not-all (match-beginning 2) (match-end 2)
                                             'amacs--render-link nil)))
        (let ((m (if hide 4 2)))
          (amacs--render-quick-prepend (match-beginning m) (match-end m)
                                       (cdr (assq marker amacs--render-quick-emphasis))))
        (when hide
          (put-text-property (match-beginning 3) (match-end 3) 'invisible t)
          (put-text-property (match-end 4) (match-end 2) 'invisible t)))
      (goto-char after))))

(defun amacs-render-quick (text)
  "Return TEXT (org markup) drawn as org will draw it, without loading org.
Headlines, tables, blocks, links, emphasis, checkboxes and list terms
are found by org's regexps and given the faces org's faces come to
\(as `font-lock-face'), the markers and link brackets hidden as
`amacs-render-org' hides them; source blocks are not fontified in
their language.  A few hundred microseconds for a long reply."
  (if (or (not amacs-render-org) (string-empty-p text))
      text
    (with-temp-buffer
      (insert text)
      (amacs--render-quick-lines)
      (amacs--render-quick-links)
      (amacs--render-quick-emphasis amacs-render-hide-emphasis-markers)
      (remove-list-of-text-properties (point-min) (point-max)
                                      '(amacs--render-verbatim amacs--render-link))
      (buffer-string))))

;;;; Loading org at idle moments, a piece at a time

(defcustom amacs-render-preload-idle 0.5
  "Seconds Emacs must have been idle before each piece of org is preloaded.
Org is loaded a file at a time, each piece only when no key is pending
and Emacs has been idle this long, so typing is never held for more than
one file's load."
  :type 'number
  :group 'amacs)

(defconst amacs--render-org-pieces
  '(cl-lib calendar find-func format-spec org-macs org-compat oc org-keys
    ol time-date iso8601 bibtex map json oc-basic org-table ob-eval ob-core
    ob-emacs-lisp org-version easy-mmode outline org-entities org-faces
    org-list ring ansi-color comint pcomplete org-pcomplete ob-comint
    org-src org-footnote org-macro ob-exp ob-table ob-lob ob-ref ob-tangle
    ob org)
  "Features `org' loads, in the order it finishes them (Emacs 28's org).
Each is required alone, so each load is one file's; a feature already
loaded costs nothing, and whatever a newer org loads besides is loaded
by the last piece, `org' itself.")

(defconst amacs--render-module-pieces
  '((ol-docview dired image exif image-mode jka-compr doc-view)
    (ol-gnus wid-edit mail-prsvr mm-util mail-utils text-property-search
             ietf-drums rfc2045 rfc2047 password-cache cl-macs eieio-core
             eieio cl-seq auth-source rmail gnus-util nnheader gnus gnus-win
             mailheader gmm-utils mailabbrev rfc2231 mail-parse mm-encode
             mm-bodies mm-decode epg-config rfc6068 epg derived epa mml-sec
             mml rfc822 puny rmc message gnus-range gnus-int gnus-spec
             parse-time nnoo netrc utf7 mail-source nnmail nnimap gnus-cloud
             xml dbus gnus-dbus gnus-start gnus-undo gnus-group mailcap
             url-vars url-parse url-util url-domsuf url-cookie url-history
             url-methods url-expand url-privacy url-proxy url browse-url dom
             svg kinsoku shr gnus-sum dig smime mml-smime mm-view mml2015
             mm-uu gnus-art dframe ezimage speedbar help-mode cl-extra
             eieio-opt gnus-search nnselect)
    (ol-eww mm-url thingatpt url-queue xdg eww))
  "For a module of `org-modules', the features it loads first, in order.
The first `org-mode' loads the modules; loaded here beforehand, a piece at
a time, that first `org-mode' is quick.")

(defvar amacs-render-preload-hold-functions nil
  "Functions of no arguments; while one returns non-nil, no preload piece runs.
The shell holds the preload while a turn waits for its answer: a piece
running when the answer comes (up to ~0.2 s of Lisp) holds it back.")

(defconst amacs--render-preload-gap 0.005
  "Seconds between one preload piece and the next.
A piece run at once after the last (`run-at-time' 0) is due before
Emacs looks at its processes again: back to back, the whole preload
\(~7 s on a loaded machine) ran before the answer that had arrived was
read.  After a gap, Emacs reads what came meanwhile first.")

(defvar amacs--render-preload-queue nil
  "Pieces of the preload still to run, each a function of no arguments.")

(defvar amacs--render-preload-timer nil
  "The timer of the next preload piece, or nil when none is under way.")

(defun amacs--render-require-step (feature)
  "Return a preload piece that requires FEATURE (if this Emacs has it)."
  (lambda () (require feature nil t)))

(defun amacs--render-module-steps ()
  "Return the preload pieces of the modules in `org-modules'.
Each module comes after what it loads first."
  (defvar org-modules)
  (mapcan (lambda (module)
            (mapcar #'amacs--render-require-step
                    (append (cdr (assq module amacs--render-module-pieces)) (list module))))
          (copy-sequence org-modules)))

(defun amacs--render-preload-steps ()
  "Return the preload's pieces.
Org a file at a time, its modules, the work buffer, a warm-up."
  (append (mapcar #'amacs--render-require-step amacs--render-org-pieces)
          ;; Known only once org is loaded: the person's `org-modules'.
          (list (lambda () (setq amacs--render-preload-queue
                                 (append (amacs--render-module-steps) amacs--render-preload-queue)))
                (lambda () (require 'org-element nil t))
                #'amacs--render-work-buffer
                (lambda () (amacs-render-org "*a* ~b~\n#+begin_src emacs-lisp\n(ignore)\n#+end_src")))))

(defun amacs--render-preload-step ()
  "Run the next preload piece if Emacs is idle and no key is pending.
Else wait for the next idle moment.  A piece runs only after
`amacs-render-preload-idle' seconds without input, and not while
`amacs-render-preload-hold-functions' hold it; the next is asked for
`amacs--render-preload-gap' later, and runs if Emacs is still idle."
  (setq amacs--render-preload-timer nil)
  (let ((idle (current-idle-time)))
    (cond ((null amacs--render-preload-queue))
          ((or (input-pending-p) (null idle)
               (< (float-time idle) amacs-render-preload-idle))
           (setq amacs--render-preload-timer
                 (run-with-idle-timer amacs-render-preload-idle nil #'amacs--render-preload-step)))
          ((run-hook-with-args-until-success 'amacs-render-preload-hold-functions)
           ;; Idle already: an idle timer would be due at once, again and again.
           (setq amacs--render-preload-timer
                 (run-at-time amacs-render-preload-idle nil #'amacs--render-preload-step)))
          (t
           (let ((piece (pop amacs--render-preload-queue)))
             (condition-case err
                 (funcall piece)
               (error (message "AMACS: preloading org: %s" (error-message-string err)))))
           (when amacs--render-preload-queue
             (setq amacs--render-preload-timer
                   (run-at-time amacs--render-preload-gap nil #'amacs--render-preload-step)))))))

(defun amacs--render-preload-start ()
  "Have the next preload piece run at the next idle moment, unless one is due."
  (unless amacs--render-preload-timer
    (setq amacs--render-preload-timer
          (run-with-idle-timer amacs-render-preload-idle nil #'amacs--render-preload-step))))

(defun amacs-render-ready-p ()
  "Non-nil when a reply can be rendered now without loading org."
  (or (not amacs-render-org)
      (and (featurep 'org) (get-buffer amacs--render-buffer))))

(defun amacs-render-after-preload (function)
  "Call FUNCTION at an idle moment once org is preloaded.
See `amacs-render-preload'."
  (setq amacs--render-preload-queue (append amacs--render-preload-queue (list function)))
  (unless (amacs-render-ready-p) (amacs-render-preload))
  (amacs--render-preload-start))

(defun amacs-render-preload ()
  "Load org and fontify once, a piece at each idle moment.
The first reply does not wait for org.  Loading org in one go holds
Emacs for about a second (more on a loaded machine), and its first
`org-mode' loads its modules, gnus among them: done as the person
starts to type, their keys would wait.  So each file
is its own piece, run only when no key is pending after
`amacs-render-preload-idle' seconds of idleness; a key waits at most
for the one file being loaded."
  (when (and amacs-render-org (not (amacs-render-ready-p))
             (not (memq #'amacs--render-work-buffer amacs--render-preload-queue)))
    (setq amacs--render-preload-queue
          (append (amacs--render-preload-steps) amacs--render-preload-queue)))
  (when amacs--render-preload-queue (amacs--render-preload-start)))

;;;; Copying

(defun amacs-render--src-block-at (pos)
  "Return (BEG . END) of the code of the org source block around POS, or nil."
  (save-excursion
    (goto-char pos)
    (let ((case-fold-search t))
      (when (re-search-backward "^[ \t]*#\\+\\(begin_src\\|begin_example\\|end_src\\|end_example\\)" nil t)
        (when (member (downcase (match-string 1)) '("begin_src" "begin_example"))
          (let ((beg (line-beginning-position 2)))
            (when (re-search-forward "^[ \t]*#\\+end_\\(src\\|example\\)" nil t)
              (let ((end (line-beginning-position)))
                (when (and (<= (save-excursion (goto-char beg) (line-beginning-position 0)) pos)
                           (<= pos (line-end-position)))
                  (cons beg end))))))))))

(defun amacs-render-code-at-point ()
  "Return the code of the source block at point (plain text), or nil."
  (let ((block (amacs-render--src-block-at (point))))
    (and block (buffer-substring-no-properties (car block) (cdr block)))))

(provide 'amacs-render)
;;; amacs-render.el ends here
