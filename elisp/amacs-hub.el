;;; amacs-hub.el --- A dashboard of the agent's mind -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; M-x amacs-hub: consciousness, threads with
;; their buffers and skills, recent monologue, scratchpad headings, the
;; last eval result, recent commits and the futures rewinds abandoned, as
;; magit sections that fold with TAB.  RET acts on the section at point: on
;; a thread it asks whether the agent is to work on it, on a buffer it visits it, on a
;; commit it shows its stat and patch, on an abandoned future its log (RET on
;; one of its commits shows that one's patch), on the chat log it opens it.  The hub is drawn from the server's state,
;; never computed in elisp, and redrawn after every tick while it is
;; shown in a window; a hidden hub asks the server for nothing (its
;; state includes `git log') and is redrawn when it is shown again.

;;; Code:

(require 'magit-section)
(require 'org)
(require 'amacs)                        ; reached by autoload: the whole client, not the link alone
(require 'amacs-research)               ; the link to the last experiment report
(require 'cl-lib)

(defcustom amacs-hub-buffer-name "*amacs-hub*"
  "Name of the hub buffer."
  :type 'string
  :group 'amacs)

(defvar amacs-hub-mode-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map magit-section-mode-map)
    (define-key map (kbd "RET") #'amacs-hub-visit)
    (define-key map (kbd "g") #'amacs-hub-refresh)
    (define-key map (kbd "c") #'amacs-open-chat-log)
    (define-key map (kbd "k") #'amacs-hub-cancel-agent)
    (define-key map (kbd "z") #'amacs-hub-pause-agent)
    (define-key map (kbd "t") #'amacs-hub-talk-to-agent)
    (define-key map (kbd "R") #'amacs-rewind)
    (define-key map (kbd "F") #'amacs-fork)
    map)
  "Keymap of `amacs-hub-mode'.")

(define-derived-mode amacs-hub-mode magit-section-mode "AMACS-Hub"
  "The AMACS hub: the agent's state in folding sections.

\\{amacs-hub-mode-map}"
  (let ((connection (amacs-current-connection)))
    (setq amacs--buffer-connection connection)
    (setf (amacs-ui-hub (amacs-connection-ui connection)) (current-buffer)))
  (setq-local revert-buffer-function (lambda (&rest _) (amacs-hub-refresh)))
  ;; A line wider than the window ends in "…", not in a bare "$" (a terminal's mark
  ;; of a cut line, which read as part of a price).
  (setq buffer-display-table (if buffer-display-table (copy-sequence buffer-display-table) (make-display-table)))
  (set-display-table-slot buffer-display-table 'truncation (make-glyph-code ?… 'shadow))
  (add-hook 'window-buffer-change-functions #'amacs-hub--on-shown nil t))

(defun amacs-hub--buffer ()
  "Return the live hub buffer of the current connection, or nil."
  (let ((buffer (amacs-ui-hub (amacs-connection-ui (amacs-current-connection)))))
    (and (buffer-live-p buffer) buffer)))

(defun amacs-hub--buffer-name (connection)
  "The name of CONNECTION's hub buffer.
The home `amacs-home' names has `amacs-hub-buffer-name'; any other's
says its home."
  (amacs-connection-buffer-name connection "hub" amacs-hub-buffer-name))

(defvar-local amacs-hub--stale nil
  "Non-nil when ticks passed while the hub was hidden: redraw it when shown.")

(defvar-local amacs-hub--state nil
  "The last state the server sent for this hub.")

(defvar amacs-hub-rendered-hook nil
  "Hook run after the hub has been drawn.")

(defun amacs-hub--line (format-string &rest args)
  "Insert FORMAT-STRING with ARGS and a newline."
  (insert (apply #'format format-string args) "\n"))

(defun amacs-hub--insert-consciousness (state)
  "Insert the consciousness section of STATE."
  (let ((budget (plist-get state :budget)))
    (magit-insert-section (amacs-consciousness)
      (magit-insert-heading
        (format "%s  tick %s  mood %s (%.2f)"
                (plist-get state :identity) (plist-get state :tick)
                (plist-get state :mood) (plist-get state :confidence)))
      (amacs-hub--line "  budget: $%.4f of $%.2f (%s pressure)"
                       (plist-get budget :cost-so-far) (plist-get budget :budget-limit)
                       (plist-get budget :pressure))
      (let ((session (plist-get state :session)))
        (amacs-hub--line "  session: %d in, %d out, cache %d read / %d written: $%.4f"
                         (plist-get session :input-tokens) (plist-get session :output-tokens)
                         (plist-get session :cache-read-tokens) (plist-get session :cache-write-tokens)
                         (plist-get session :cost)))
      (amacs-hub--line "  model:  %s" (plist-get state :model))
      (insert "\n"))))

(defun amacs-hub--insert-threads (state)
  "Insert the threads of STATE, each with its buffers and skills."
  (let ((threads (plist-get state :threads)))
    (magit-insert-section (amacs-threads)
      (magit-insert-heading (format "Threads (%d)" (length threads)))
      (dolist (thread threads)
        (magit-insert-section (amacs-thread (plist-get thread :id))
          (magit-insert-heading
            (format "  %s [%s] %s" (plist-get thread :id) (plist-get thread :status)
                    (or (plist-get thread :concern) "")))
          (dolist (buffer (plist-get thread :buffers))
            (magit-insert-section (amacs-buffer buffer)
              (amacs-hub--line "    buffer: %s" buffer)))
          (dolist (skill (plist-get thread :skills))
            (magit-insert-section (amacs-skill skill)
              (amacs-hub--line "    skill:  %s" skill)))))
      (insert "\n"))))

(defun amacs-hub--insert-agents (state)
  "Insert the agents of STATE: the primary, then every subagent, each on its line."
  (let ((agents (plist-get state :agents)))
    (magit-insert-section (amacs-agents)
      (magit-insert-heading (format "Agents (%d): steps (model calls) and cost since this server started"
                                    (length agents)))
      (dolist (agent agents)
        (magit-insert-section (amacs-agent (plist-get agent :id))
          (amacs-hub--line "  %-16s %-10s %-14s %-9s %3d step%s  $%.4f"
                           (plist-get agent :id) (plist-get agent :type) (plist-get agent :template)
                           (plist-get agent :state) (plist-get agent :steps)
                           (if (eql (plist-get agent :steps) 1) " " "s") (plist-get agent :cost))))
      (insert "\n"))))

(defun amacs-hub--insert-mcp (state)
  "Insert the MCP servers of STATE: state, tools, last error, tools left out.
Nothing when AMACS_HOME/mcp.json names no server and has no problem."
  (let ((servers (plist-get state :mcp))
        (problems (plist-get state :mcp-problems)))
    (when (or servers problems)
      (magit-insert-section (amacs-mcp)
        (magit-insert-heading (format "MCP servers (%d)" (length servers)))
        (dolist (problem problems)
          (amacs-hub--line "  %s" (propertize problem 'font-lock-face 'error)))
        (dolist (server servers)
          (magit-insert-section (amacs-mcp-server (plist-get server :name))
            (amacs-hub--line "  %-14s %-6s %-9s %3d calls  %s"
                             (plist-get server :name) (plist-get server :transport) (plist-get server :state)
                             (or (plist-get server :calls) 0)
                             (mapconcat #'identity (plist-get server :tools) " "))
            (when (plist-get server :last-error)
              (amacs-hub--line "    last error: %s" (plist-get server :last-error)))
            (dolist (tool (plist-get server :left-out))
              (amacs-hub--line "    left out: %s" tool))))
        (insert "\n")))))

(defun amacs-hub--insert-memory (state)
  "Insert the Memory section of STATE: the primary's pinned items, and a count.
The count is of the versions long-term memory holds.  RET on an item
shows it."
  (let* ((memory (plist-get state :memory))
         (pinned (plist-get memory :pinned))
         (all (or (plist-get memory :pinned-count) (length pinned))))
    (magit-insert-section (amacs-memory)
      (magit-insert-heading
        (format "Memory: %d pinned, %d versions in long-term memory (M-x amacs-memory-search)"
                all (or (plist-get memory :versions) 0)))
      (dolist (item pinned)
        (magit-insert-section (amacs-memory-item (plist-get item :mem-id))
          (amacs-hub--line "  %-20s %-8s v%-3d %s" (plist-get item :name) (plist-get item :kind)
                           (plist-get item :version) (plist-get item :preview))))
      (when (> all (length pinned))
        (amacs-hub--line "  (the %d newest shown; M-x amacs-memory-search finds the others)" (length pinned)))
      (insert "\n"))))

(defun amacs-hub--show-transcript (agent)
  "Show the transcript of AGENT in a buffer of its own."
  (let ((name (amacs-connection-buffer-name (amacs-current-connection) (format "transcript %s" agent))))
    (amacs-call 'agent_transcript (list agent)
                (lambda (text)
                  (let ((buffer (get-buffer-create name)))
                    (with-current-buffer buffer
                      (let ((inhibit-read-only t))
                        (erase-buffer)
                        (insert text))
                      (goto-char (point-max))     ; the newest events: what it does now
                      (view-mode 1))
                    (amacs-hub--show-beside-shell buffer)
                    (recenter -1))))))

(defun amacs-hub--insert-list (type title items describe)
  "Insert section TYPE titled TITLE with a line per ITEMS from DESCRIBE."
  (magit-insert-section ((eval type))
    (magit-insert-heading title)
    (if items
        (dolist (item items) (amacs-hub--line "  %s" (amacs-shell--for-person (funcall describe item))))
      (amacs-hub--line "  (none)"))
    (insert "\n")))

(defun amacs-hub--insert-eval (state)
  "Insert the last eval result of STATE."
  (let ((result (plist-get state :last-eval)))
    (magit-insert-section (amacs-eval)
      (magit-insert-heading "Last eval result")
      (amacs-hub--line "  %s"
                       (amacs-shell--for-person
                        (cond ((null result) "(none)")
                              ((plist-get result :success)
                               (format "tick %s ok: %s" (plist-get result :tick) (plist-get result :result)))
                              (t (format "tick %s error: %s" (plist-get result :tick) (plist-get result :error))))))
      (insert "\n"))))

(defun amacs-hub--insert-commits (state)
  "Insert the recent commits of STATE."
  (magit-insert-section (amacs-commits)
    (magit-insert-heading "Recent commits")
    (dolist (commit (plist-get state :commits))
      (magit-insert-section (amacs-commit (plist-get commit :sha))
        (amacs-hub--line "  %s %s" (substring (plist-get commit :sha) 0 7) (plist-get commit :subject))))
    (insert "\n")))

(defun amacs-hub--future-inputs (future)
  "Return FUTURE's inputs, in the words of its line in the hub.
One input is its words; two, both (\"note, eval\"); more, the first and
the last and how many (\"note … eval (5 inputs)\"), each cut to fit."
  (let ((first (plist-get future :first-input))
        (last (plist-get future :last-input))
        (count (or (plist-get future :inputs) (if (plist-get future :first-input) 1 0))))
    (cl-flet ((cut (text width) (truncate-string-to-width text width nil nil "…")))
      (cond ((or (null first) (= count 0)) "(no input)")
            ((or (= count 1) (null last)) (cut first 50))
            ((= count 2) (format "%s, %s" (cut first 24) (cut last 24)))
            (t (format "%s … %s (%d inputs)" (cut first 20) (cut last 20) count))))))

(defun amacs-hub--insert-abandoned (state)
  "Insert the futures STATE's rewinds abandoned: ticks, inputs, ref."
  (let ((futures (plist-get state :abandoned)))
    (when futures
      (magit-insert-section (amacs-abandoned-futures)
        (magit-insert-heading "Abandoned futures")
        (dolist (future futures)
          (magit-insert-section (amacs-abandoned future)
            (amacs-hub--line "  ticks %s-%s: %s  %s" (1+ (plist-get future :to-tick))
                             (plist-get future :from-tick)
                             (amacs-hub--future-inputs future)
                             (plist-get future :ref))))))))

(defun amacs-hub--place (pos window)
  "Where POS is in the hub: (WINDOW IDENT LINE COLUMN ROW).
IDENT names the section at POS (`magit-section-ident'), LINE and COLUMN
are POS's place in it, ROW is POS's screen line in WINDOW (nil: none)."
  (save-excursion
    (goto-char pos)
    (let ((section (magit-current-section)))
      (list window (magit-section-ident section)
            (- (line-number-at-pos) (line-number-at-pos (oref section start)))
            (current-column)
            (and window (pos-visible-in-window-p pos window)
                 (1- (count-screen-lines (window-start window) (min (1+ pos) (point-max)) nil window)))))))

(defun amacs-hub--find (ident line column)
  "Position of LINE and COLUMN into the section IDENT, as magit's refresh does.
A section that is gone gives way to the nearest one still there: its
parent, or the parent's parent."
  (let ((section nil))
    (while (and ident (not (setq section (magit-get-section ident))))
      (setq ident (cdr ident) line 0 column 0))
    (save-excursion
      (goto-char (if section (oref section start) (point-min)))
      (when section
        (let ((start (point)))
          (forward-line line)
          (move-to-column column)
          (unless (eq (magit-current-section) section) (goto-char start))))
      (point))))

(defun amacs-hub--restore (places)
  "Put point and each window's point back where PLACES (`amacs-hub--place') say."
  (pcase-dolist (`(,window ,ident ,line ,column ,row) places)
    (let ((pos (amacs-hub--find ident line column)))
      (if (not window)
          (goto-char pos)
        (set-window-point window pos)
        (when row                       ; the line stays on its screen row
          (set-window-start window (save-excursion (goto-char pos) (forward-line (- row)) (point)) t))))))

(defun amacs-hub--render (state)
  "Draw STATE into the hub buffer, keeping point on the same section.
Point, and the point of every window that shows the hub, stay on the
same section (an agent's line, a thread, a heading), and the buffer is
left unmodified."
  (let ((buffer (amacs-hub--buffer)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (setq amacs-hub--state state)
        (let* ((inhibit-read-only t)
               (places (cons (amacs-hub--place (point) nil)
                             (mapcar (lambda (window) (amacs-hub--place (window-point window) window))
                                     (get-buffer-window-list buffer nil t)))))
          (with-silent-modifications
            (erase-buffer)
            (magit-insert-section (amacs-hub)
              (when (cdr (amacs-live-connections)) ; which home, when Emacs talks to several
                (amacs-hub--line "AMACS home: %s" (amacs-connection-name)))
              (amacs-hub--insert-consciousness state)
              (amacs-hub--insert-threads state)
              (amacs-hub--insert-agents state)
              (amacs-hub--insert-mcp state)
              (amacs-hub--insert-memory state)
              (amacs-hub--insert-list 'amacs-monologue "Recent monologue" (plist-get state :monologue)
                                      (lambda (m) (format "[%s] %s" (plist-get m :tick) (plist-get m :text))))
              (amacs-hub--insert-list 'amacs-scratchpad "Scratchpad" (plist-get state :scratchpad)
                                      (lambda (s) (format "[%s] %s%s" (plist-get s :tick) (plist-get s :heading)
                                                          (if (plist-get s :thread)
                                                              (format " (%s)" (plist-get s :thread)) ""))))
              (amacs-hub--insert-eval state)
              (amacs-hub--insert-commits state)
              (amacs-hub--insert-abandoned state)
              (magit-insert-section (amacs-chat-log (plist-get state :chat-log))
                (amacs-hub--line "Chat log: %s" (abbreviate-file-name (plist-get state :chat-log))))
              (let ((report (amacs-report-last-file)))
                (when report
                  (magit-insert-section (amacs-report report)
                    (amacs-hub--line "Report: %s" (abbreviate-file-name report)))))))
          (set-buffer-modified-p nil)
          (amacs-hub--restore places)))
      (run-hooks 'amacs-hub-rendered-hook))))

(defun amacs-hub-refresh ()
  "Redraw the hub from the server's state."
  (interactive)
  (let ((buffer (amacs-hub--buffer)))
    (when buffer (with-current-buffer buffer (setq amacs-hub--stale nil))))
  (amacs-when-ready
   (lambda () (amacs-call 'hub_state nil #'amacs-hub--render))))

(defun amacs-hub--shown-p (buffer)
  "Non-nil when BUFFER is shown in a window of a visible frame."
  (get-buffer-window buffer 'visible))

(defun amacs-hub--on-tick (_event)
  "Redraw the hub after a tick if it is shown; else note that it is stale."
  (let ((buffer (amacs-hub--buffer)))
    (when (and buffer (amacs-live-p))
      (if (amacs-hub--shown-p buffer)
          (amacs-hub-refresh)
        (with-current-buffer buffer (setq amacs-hub--stale t))))))

(defun amacs-hub--on-shown (window)
  "Redraw the stale hub now shown in WINDOW (`window-buffer-change-functions')."
  (let ((buffer (window-buffer window)))
    (with-current-buffer buffer         ; the hub's own connection
      (when (and amacs-hub--stale (amacs-live-p))
        (setq amacs-hub--stale nil)
        (amacs-hub-refresh)))))

(amacs-on-event "tick" #'amacs-hub--on-tick)

(defvar-local amacs-hub--agents-seen nil
  "The working subagents and their states the last agents event reported.")

(defun amacs-hub--on-agents (event)
  "Redraw the hub when EVENT's working subagents or their states changed.
A task that ends, or one paused, shows at once; a mere progress report
redraws nothing."
  (let ((buffer (amacs-hub--buffer))
        (seen (mapcar (lambda (a) (cons (plist-get a :id) (plist-get a :state)))
                      (plist-get event :agents))))
    (when (and buffer (not (equal seen (buffer-local-value 'amacs-hub--agents-seen buffer))))
      (with-current-buffer buffer (setq amacs-hub--agents-seen seen))
      (amacs-hub--on-tick event))))

(amacs-on-event "agents" #'amacs-hub--on-agents)

(defun amacs-hub--on-ready ()
  "Redraw the hub for a server that is ready (`amacs-ready-hook').
Its state, not the last server's: after \[amacs-restart] the hub kept
the old session's cost until \`g'."
  (amacs-hub--on-tick nil))

(add-hook 'amacs-ready-hook #'amacs-hub--on-ready)

;; A rewind's moved lines (whole model requests) are listed in a commit's stat,
;; not drawn: a view of a commit is its stat and the patch of the mind's files.
(defconst amacs-hub--moved-paths '("transcripts" "logs")
  "The folders of a home that only a rewind commits (onto its abandoned ref).")

(defun amacs-hub--insert-commit (home sha)
  "Insert commit SHA of HOME: its message and stat, then its patch.
The patch leaves out `amacs-hub--moved-paths', which the stat lists."
  (let ((start (point)))
    (call-process "git" nil t nil "-C" home "show" "--stat" "--format=medium" sha)
    (when (save-excursion
            (goto-char start)
            (re-search-forward (concat "^ \\(" (regexp-opt amacs-hub--moved-paths) "\\)/") nil t))
      (insert (format "\nThe lines of %s a rewind moved are listed above, not drawn: git -C %s show %s -- %s\n"
                      (mapconcat (lambda (d) (concat d "/")) amacs-hub--moved-paths " and ")
                      (shell-quote-argument (abbreviate-file-name home)) (substring sha 0 (min 12 (length sha)))
                      (mapconcat #'identity amacs-hub--moved-paths " "))))
    (insert "\n")
    (apply #'call-process "git" nil t nil "-C" home "show" "--format=" "--patch" sha "--" "."
           (mapcar (lambda (d) (concat ":(exclude)" d)) amacs-hub--moved-paths))))

(defun amacs-hub--show-commit (sha)
  "Show commit SHA of the AMACS home in the other window: its stat, then its patch.
Point stays in the list RET was pressed in (the hub, an abandoned
future's log), so \`n' then RET walks the commits, as in magit's log."
  (let ((home (plist-get amacs-hub--state :home))
        (buffer (get-buffer-create (amacs-connection-buffer-name (amacs-current-connection) "commit"))))
    (with-current-buffer buffer
      (let ((inhibit-read-only t))
        (erase-buffer)
        (amacs-hub--insert-commit home sha))
      (diff-mode)
      (goto-char (point-min))
      (view-mode 1))
    (display-buffer buffer '(nil (inhibit-same-window . t)))))

(defvar amacs-hub-log-mode-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map special-mode-map)
    (define-key map (kbd "n") #'forward-button)
    (define-key map (kbd "p") #'backward-button)
    (define-key map (kbd "RET") #'push-button)
    map)
  "Keymap of `amacs-hub-log-mode'.")

(define-derived-mode amacs-hub-log-mode special-mode "AMACS-Log"
  "A log of commits of an AMACS home, one button per commit.
RET shows the commit at point in the other window; \`n' and \`p' go to
the next and previous commit.

\{amacs-hub-log-mode-map}")

(defun amacs-hub--show-abandoned (future)
  "Show the log of FUTURE, which a rewind abandoned: each commit's stat.
As light as a commit's view, however long the future: RET on a
commit's line shows that commit's patch, as the hub shows a commit."
  (let* ((home (plist-get amacs-hub--state :home))
         (connection (amacs-current-connection))
         (buffer (get-buffer-create (amacs-connection-buffer-name connection "abandoned"))))
    (with-current-buffer buffer
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (format "Abandoned future %s: ticks %s-%s, left by a rewind to tick %s\n"
                        (plist-get future :ref) (1+ (plist-get future :to-tick))
                        (plist-get future :from-tick) (plist-get future :to-tick))
                "RET on a commit shows its patch; n and p go to the next and previous commit.\n\n")
        (let ((start (point)) heads)
          (call-process "git" nil t nil "-C" home "log" "--stat" "--format=%n%h %s"
                        (concat "HEAD.." (plist-get future :ref)))
          (goto-char start)
          (while (re-search-forward "^\\([0-9a-f]\\{7,\\}\\) " nil t)
            (push (cons (line-beginning-position) (match-string 1)) heads))
          ;; A commit's button is its whole block, its stat included: RET
          ;; anywhere on it shows that commit's patch.
          (let ((end (point-max)))
            (dolist (head heads)
              (make-text-button (car head) (save-excursion (goto-char end) (skip-chars-backward "\n") (point))
                                'sha (cdr head) 'help-echo "RET: show this commit's patch"
                                'action (lambda (button)
                                          (amacs-with-connection connection
                                            (amacs-hub--show-commit (button-get button 'sha)))))
              (setq end (car head))))))
      (amacs-hub-log-mode)
      (setq amacs--buffer-connection connection)
      (setq-local amacs-hub--state (list :home home))
      (goto-char (point-min))
      (forward-button 1 nil nil t))
    (pop-to-buffer buffer)))

(defun amacs-hub-visit ()
  "Act on the section at point.
A thread, buffer, agent, memory item, commit, abandoned future, the chat
log or the report."
  (interactive)
  (let* ((section (magit-current-section))
         (value (and section (oref section value))))
    (pcase (and section (oref section type))
      ('amacs-thread (amacs-hub--visit-thread section value))
      ('amacs-buffer
       (if (get-buffer value) (pop-to-buffer value) (find-file-other-window value)))
      ('amacs-commit (amacs-hub--show-commit value))
      ('amacs-abandoned (amacs-hub--show-abandoned value))
      ('amacs-agent (amacs-hub--show-transcript value))
      ('amacs-memory-item (amacs-memory-show value))
      ('amacs-chat-log (amacs-open-chat-log))
      ('amacs-report (amacs-report-browse value))
      (_ (magit-section-toggle section)))))

(defun amacs-hub--visit-thread (section thread)
  "Ask whether the agent is to work on THREAD (SECTION's); else fold SECTION.
RET shows, everywhere else in the hub; making a thread the active one
changes what the agent works on, so it is asked first."
  (let ((active (cl-find-if (lambda (th) (equal (plist-get th :status) "active"))
                            (plist-get amacs-hub--state :threads))))
    (if (and (not (equal (plist-get active :id) thread))
             (y-or-n-p (format "Make the agent work on thread %s%s? " thread
                               (if active (format " (it works on %s now)" (plist-get active :id)) ""))))
        (amacs-call 'thread_switch (list thread)
                    (lambda (_) (message "AMACS: switched to thread %s" thread) (amacs-hub-refresh)))
      (magit-section-toggle section))))

(defun amacs-hub--agent-at-point ()
  "Return the id of the subagent whose section is at point.
Signal a `user-error' elsewhere."
  (let ((section (magit-current-section)))
    (unless (and section (eq (oref section type) 'amacs-agent)
                 (not (equal (oref section value) "primary")))
      (user-error "Not on a subagent's line (C-c C-c in the shell interrupts the primary)"))
    (oref section value)))

(defun amacs-hub--agent-state (agent)
  "Return the state of AGENT in the hub's last state, or nil."
  (plist-get (cl-find-if (lambda (a) (equal (plist-get a :id) agent)) (plist-get amacs-hub--state :agents))
             :state))

(defun amacs-hub--ended (agent)
  "Return the state of AGENT if it has ended in the hub's last state, else nil.
The server says which agents have ended (`:ended'); the hub lists no states."
  (let ((entry (cl-find-if (lambda (a) (equal (plist-get a :id) agent)) (plist-get amacs-hub--state :agents))))
    (and (plist-get entry :ended) (plist-get entry :state))))

(defun amacs-hub--say-ended (agent state)
  "Say in the echo area that AGENT has ended, in STATE."
  (message "AMACS: %s has already ended (%s)" agent state))

(defun amacs-hub--control-failed (err)
  "Say the server's ERR about a control of an agent, and redraw the hub."
  (message "AMACS: %s" err)
  (amacs-hub-refresh))

(defun amacs-hub--compulsion (agent)
  "Return the agent a compulsion AGENT watches, or nil if AGENT is no compulsion."
  (let ((entry (cl-find-if (lambda (a) (equal (plist-get a :id) agent)) (plist-get amacs-hub--state :agents))))
    (and (equal (plist-get entry :type) "compulsion") (plist-get entry :parent))))

(defun amacs-hub-cancel-agent (agent)
  "Cancel AGENT, the subagent at point, and every subagent below it.
An agent that has already ended (perhaps while you were asked) is said
to have ended, in the echo area at once.  A compulsion obeys no agent,
only itself and you: you are asked to confirm that you overrule it."
  (interactive (list (amacs-hub--agent-at-point)))
  (let ((ended (amacs-hub--ended agent))
        (watched (amacs-hub--compulsion agent)))
    (cond
     (ended (amacs-hub--say-ended agent ended))
     ((y-or-n-p (if watched
                    (format "%s is a compulsion watching %s; only it ends itself.  Cancel it anyway? "
                            agent watched)
                  (format "Cancel %s and its subagents? " agent)))
      (if (setq ended (amacs-hub--ended agent)) ; it ended while you were asked
          (amacs-hub--say-ended agent ended)
        (amacs-call 'person_agent_control (list "cancel" agent (and watched t))
                    (lambda (_) (message "AMACS: %s cancelled" agent) (amacs-hub-refresh))
                    #'amacs-hub--control-failed))))))

(defun amacs-hub-talk-to-agent (agent text)
  "Say TEXT to AGENT, the subagent at point; its answer appears in the shell.
An agent that has ended is said to have ended before anything is asked."
  (interactive (let* ((agent (amacs-hub--agent-at-point))
                      (ended (amacs-hub--ended agent)))
                 (when ended (user-error "AMACS: %s has already ended (%s)" agent ended))
                 (list agent (read-string (format "Say to %s: " agent)))))
  (amacs-call 'person_agent_talk (list agent text t) ; t: the shell shows what was said
              (lambda (r) (message "AMACS: %s %s" agent
                                   (cond ((plist-get r :paused) "is paused; it will read it once resumed (z)")
                                         ((plist-get r :queued) "is at work: it reads it once that work is done, then answers in the shell")
                                         (t "is answering"))))
              #'amacs-hub--control-failed))

(defun amacs-hub-pause-agent (agent)
  "Pause AGENT, the subagent at point, or resume it if it is paused.
An agent that has ended is said to have ended, in the echo area.
Pausing a compulsion asks first: it obeys no agent, only you, and
while paused it is not asked about the agent it watches."
  (interactive (list (amacs-hub--agent-at-point)))
  (let* ((action (if (equal (amacs-hub--agent-state agent) "paused") "resume" "pause"))
         (ended (amacs-hub--ended agent))
         (watched (and (equal action "pause") (amacs-hub--compulsion agent))))
    (cond
     (ended (amacs-hub--say-ended agent ended))
     ((and watched
           (not (y-or-n-p (format "%s is a compulsion watching %s; only it ends itself.  Pause it anyway? "
                                  agent watched))))
      (message "AMACS: %s not paused" agent))
     (t (amacs-call 'person_agent_control (list action agent (and watched t))
                    (lambda (_) (message "AMACS: %s %sd" agent action) (amacs-hub-refresh))
                    #'amacs-hub--control-failed)))))

;;;###autoload
(defun amacs-hub ()
  "Open the AMACS hub of the current connection (its shell's home).
It is selected, its keys work at once; called from another window, the
echo area says so and that \\<amacs-hub-mode-map>\\[quit-window] goes back."
  (interactive)
  (let* ((connection (amacs-current-connection))
         (buffer (or (amacs-hub--buffer)
                     (let* ((name (amacs-hub--buffer-name connection))
                            (old (get-buffer name)))
                       (if (and old (with-current-buffer old (derived-mode-p 'amacs-hub-mode)))
                           (generate-new-buffer name) ; another home's
                         (get-buffer-create name))))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'amacs-hub-mode)
        ;; The new buffer has no connection of its own yet: the mode takes the caller's.
        (amacs-with-connection connection (amacs-hub-mode))
        ;; magit-section's hooks need a root section before the state arrives.
        (let ((inhibit-read-only t))
          (magit-insert-section (amacs-hub)
            (magit-insert-heading "AMACS hub: waiting for the server..."))
          (set-buffer-modified-p nil))))
    (let ((from (selected-window)))
      (pop-to-buffer buffer)
      ;; A newcomer, not told, pressed C-x o to reach the hub and left it.
      (unless (eq (selected-window) from)
        (message "%s" (substitute-command-keys
                       "AMACS: the cursor is in the hub; \\<amacs-hub-mode-map>\\[quit-window] goes back (\\[describe-mode]: its keys)"))))
    (amacs-hub-refresh)
    buffer))

;;;; The agent's memory, as the person reads it

(defvar amacs-memory-mode-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map special-mode-map)
    (define-key map (kbd "n") #'amacs-memory-next-version)
    (define-key map (kbd "p") #'amacs-memory-previous-version)
    (define-key map (kbd "v") #'amacs-memory-version)
    (define-key map (kbd "s") #'amacs-memory-search)
    map)
  "Keymap of `amacs-memory-mode'.")

(define-derived-mode amacs-memory-mode special-mode "AMACS-Memory"
  "One version of an item of the agent's memory, read only.
\\<amacs-memory-mode-map>\\[amacs-memory-next-version] and \\[amacs-memory-previous-version] \
show the next and previous version, \\[amacs-memory-version] asks for one,
\\[amacs-memory-search] searches the memory.

\\{amacs-memory-mode-map}")

(defvar-local amacs-memory--shown nil
  "The item this buffer shows, as the server described it (a plist).")

(defun amacs-memory--call (method &rest args)
  "Call METHOD with ARGS on the server and return its answer.
The server's refusal is a `user-error' saying it."
  (condition-case err
      (amacs--call-sync method args)
    (amacs-remote-error (user-error "AMACS: %s" (amacs-error-message err)))))

;;;###autoload
(defun amacs-memory-show (mem-id &optional version)
  "Show the item MEM-ID of the agent's memory, at VERSION.
Without VERSION, the version MEM-ID names, or the latest.
MEM-ID is its address, AGENT:BRAIN:NAME[:VERSION], as the hub and a
search show it (the <EOT>s the agent sees may be typed or not).
Showing it changes nothing in the agent's memory."
  (interactive (list (read-string "Memory item (AGENT:BRAIN:NAME[:VERSION]): ")))
  (let* ((connection (amacs-current-connection))
         (item (amacs-with-connection connection (amacs-memory--call 'memory_item mem-id version)))
         (buffer (get-buffer-create (amacs-connection-buffer-name connection "memory"))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'amacs-memory-mode) (amacs-memory-mode))
      (setq amacs--buffer-connection connection)
      (setq amacs-memory--shown item)
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (format "%s  version %d of %d  (%s%s)\n" (plist-get item :name) (plist-get item :version)
                        (plist-get item :latest) (plist-get item :kind)
                        (let ((tags (plist-get item :tags)))
                          (if tags (concat ", tags: " (mapconcat #'identity tags " ")) "")))
                (propertize (format "%s  written %s\n" (plist-get item :mem-id)
                                    (format-time-string "%Y-%m-%d %H:%M:%S"
                                                        (/ (plist-get item :created-at-ms) 1000.0)))
                            'font-lock-face 'shadow)
                (propertize (substitute-command-keys
                             "\\<amacs-memory-mode-map>\\[amacs-memory-previous-version] \\[amacs-memory-next-version]: \
other versions, \\[amacs-memory-version]: a version, \\[amacs-memory-search]: search\n\n")
                            'font-lock-face 'shadow)
                (plist-get item :text) "\n"))
      (goto-char (point-min)))
    (amacs-hub--show-beside-shell buffer)
    buffer))

(defun amacs-memory--base ()
  "Return the address of the item shown here, without its version."
  (unless amacs-memory--shown (user-error "No memory item here"))
  (let ((mem-id (plist-get amacs-memory--shown :mem-id)))
    (replace-regexp-in-string ":[0-9]+\\'" "" mem-id)))

(defun amacs-memory-version (version)
  "Show VERSION of the item shown here."
  (interactive (list (read-number (format "Version (1-%d): " (plist-get amacs-memory--shown :latest))
                                  (plist-get amacs-memory--shown :version))))
  (let ((latest (plist-get amacs-memory--shown :latest)))
    (unless (and (integerp version) (<= 1 version latest))
      (user-error "%s has versions 1 to %d" (plist-get amacs-memory--shown :name) latest))
    (amacs-memory-show (amacs-memory--base) version)))

(defun amacs-memory-next-version ()
  "Show the next version of the item shown here."
  (interactive)
  (let ((version (plist-get amacs-memory--shown :version)))
    (if (>= version (plist-get amacs-memory--shown :latest))
        (message "AMACS: version %d is the latest" version)
      (amacs-memory-show (amacs-memory--base) (1+ version)))))

(defun amacs-memory-previous-version ()
  "Show the previous version of the item shown here."
  (interactive)
  (let ((version (plist-get amacs-memory--shown :version)))
    (if (<= version 1)
        (message "AMACS: version 1 is the first")
      (amacs-memory-show (amacs-memory--base) (1- version)))))

(define-derived-mode amacs-memory-search-mode special-mode "AMACS-Memory-Search"
  "Hits of a search of the agent's memory: RET on one shows that version.

\\{amacs-memory-search-mode-map}")

(let ((map amacs-memory-search-mode-map))
  (define-key map (kbd "n") #'forward-button)
  (define-key map (kbd "p") #'backward-button)
  (define-key map (kbd "s") #'amacs-memory-search))

;;;###autoload
(defun amacs-memory-search (query)
  "Search the agent's long-term memory for QUERY; list the hits in a buffer.
One hit per item: its newest version that matches (and the latest
version, when a newer one does not match).  RET on a hit shows that
version.  Searching changes nothing in the agent's memory."
  (interactive (list (read-string "Search the agent's memory: ")))
  (let* ((connection (amacs-current-connection))
         (hits (amacs-with-connection connection (amacs-memory--call 'memory_find query)))
         (buffer (get-buffer-create (amacs-connection-buffer-name connection "memory-search"))))
    (with-current-buffer buffer
      (amacs-memory-search-mode)
      (setq amacs--buffer-connection connection)
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (format "%d hit%s for %S in the agent's memory; RET shows one, n and p move.\n\n"
                        (length hits) (if (= (length hits) 1) "" "s") query))
        (dolist (hit hits)
          (let ((start (point)) (mem-id (plist-get hit :mem-id)))
            (insert (format "%s  (%s%s)\n    %s\n" mem-id (plist-get hit :kind)
                            (if (plist-get hit :latest) (format ", the latest is version %d" (plist-get hit :latest)) "")
                            (replace-regexp-in-string "[ \t\n]+" " " (plist-get hit :snippet))))
            (make-text-button start (1- (point)) 'help-echo "RET: show this version"
                              'action (lambda (_) (amacs-with-connection connection (amacs-memory-show mem-id)))))))
      (goto-char (point-min))
      (when hits (forward-button 1)))
    (amacs-hub--show-beside-shell buffer)
    buffer))

;;;; The chat log in org-mode

(defun amacs-chat-log-fold ()
  "Fold the chat log: every tick's headings, the newest tick open."
  (org-content 2)
  (goto-char (point-max))
  (when (re-search-backward "^\\* Tick " nil t)
    (org-show-subtree)))

;;;###autoload
(defun amacs-open-chat-log ()
  "Open agent-chat.org in `org-mode', folded to its ticks, at the newest.
It opens read-only: the agent writes it, and text typed into it by a
person who took it for the shell would become the agent's conversation.
\\[read-only-mode] makes it writable."
  (interactive)
  (let ((file (or (plist-get amacs-hub--state :chat-log)
                  (and (amacs-status :home)
                       (expand-file-name "agent-chat.org" (amacs-status :home)))
                  (expand-file-name "agent-chat.org" (amacs-connection-home (amacs-current-connection))))))
    (amacs-hub--show-beside-shell (find-file-noselect file))
    (unless (derived-mode-p 'org-mode) (org-mode))
    (unless buffer-read-only
      (read-only-mode 1)
      (message "%s" (substitute-command-keys
                     "agent-chat.org opens read-only: the agent writes it (\\[read-only-mode] to edit)")))
    (amacs-chat-log-fold)))

(defun amacs-hub--shell-window-p (window)
  "Return non-nil when an AMACS shell is in WINDOW."
  (with-current-buffer (window-buffer window) (derived-mode-p 'amacs-shell-mode)))

(defun amacs-hub--show-beside-shell (buffer)
  "Select BUFFER in a window that is not the shell's: the shell stays in view.
When the frame's other windows show other homes' shells (a fork's beside
its parent's), BUFFER goes below the selected shell: put in the other
shell's window, a fork's chat log read as the parent's."
  (cond ((not (amacs-hub--shell-window-p (selected-window)))
         (pop-to-buffer-same-window buffer))
        ((and (not (get-buffer-window buffer))
              (let ((others (remq (selected-window) (window-list nil 'no-minibuffer))))
                (and others (cl-every #'amacs-hub--shell-window-p others))))
         (pop-to-buffer buffer '(display-buffer-below-selected)))
        (t (pop-to-buffer buffer t))))

(provide 'amacs-hub)
;;; amacs-hub.el ends here
