;;; amacs-agent.el --- Functions the agent calls from its eval -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The agent-facing API keeps the specs' `agent-' names.  These run
;; inside the agent's eval and need an answer now, so they use the fast
;; synchronous call (`amacs--call-sync').  A refusal from the server
;; (a harness-owned field, a bad value) is signalled as an error, which
;; the agent then sees as its eval result.
;;
;; These `agent-' names are the package's one exemption from its prefix
;; `amacs-': the specs and the agent's skill call them so, and the agent
;; writes them in every eval.  `package-lint' reports each as not starting
;; with the package's prefix; scripts/package-lint-batch.el lets exactly
;; those errors through (for functions defined in this file) and fails
;; on any other.

;;; Code:

(require 'amacs-transport)
(require 'amacs-eval)
(require 'amacs-shell-output)           ; memory addresses as the person reads them

(defun agent-consciousness ()
  "Return the agent's consciousness alist."
  (car (read-from-string (amacs--call-sync 'consciousness nil))))

(defun agent-set-consciousness (field value)
  "Set consciousness FIELD (a symbol) to VALUE; return the new value.
Harness-owned fields are refused with an error: identity, the tick
and time, budget, and the last eval result."
  (amacs--call-sync 'set_consciousness
                    (list (if (symbolp field) (symbol-name field) field) value)))

;;;; Memory (ARCHITECTURE.md, Memory and MemIds; brain tools)

;; Like the agent functions below, these send only the running eval's
;; id: the server acts in the RAM of the agent that eval runs for
;; (ARCHITECTURE.md, Agent and World).  Long-term memory is shared by every agent.

(defun agent-memory-create (name content &rest options)
  "Create memory item NAME holding CONTENT; return its MemId and version.
CONTENT is a string or data.  OPTIONS: :kind (\"note\" or
\"summary\") and :tags (a string or a list of strings).  The item
is pinned in active memory until evicted."
  (amacs--agent-call 'memory_create name content options))

(defun agent-memory-mutate (mem-id content)
  "Write CONTENT as the next version of the item MEM-ID; return the new version.
Only items shown with \"mutable\": true are changed; the change shows
next tick.  A scratchpad entry takes a string (its new text) or a
plist of :heading, :thread and :content, and scratchpad.org changes
too.  Earlier versions stay in long-term memory."
  (amacs--agent-call 'memory_mutate mem-id content))

(defun agent-memory-evict (mem-id)
  "Move the item MEM-ID out of active memory; a handle with its MemId stays.
Only items shown with \"evictable\": true are evicted;
`agent-memory-load' brings one back."
  (amacs--agent-call 'memory_evict mem-id))

(defun agent-memory-load (mem-id &optional version &rest options)
  "Bring the item MEM-ID into active memory and return it with its content.
Loads the latest version, the one MEM-ID names, or VERSION.  OPTIONS
are :version, and :offset and :limit (characters) to read a long text
a part at a time: the answer has :total-chars and, for a part,
:offset, :limit and :next-offset (nil after the last part).  VERSION
may be left out: (agent-memory-load ID :offset 8000)."
  (let ((opts (if (keywordp version)
                  (cons version options)
                (append (and version (list :version version)) options))))
    (amacs--agent-call 'memory_load mem-id opts)))

(defun agent-memory-search (query &rest options)
  "Search long-term memory for QUERY; return ranked hits with snippets.
One hit per item: its newest version that matches, and :latest N when
the item has a newer version that does not.
OPTIONS: :limit (default 10), :tags, :mode (\"keyword\")."
  (amacs--agent-call 'memory_search query options))

(defun agent-history-search (query &rest options)
  "Search your history for QUERY; return the lines holding it, newest first.
The history is the commits of your ticks (their subjects), your monologue
and the diff of each tick (what it changed in your files).  Each match is
\(:tick N :in SOURCE :line TEXT), :file too for a diff line, whose + or -
says added or removed.  OPTIONS: :tick N (that tick only), :limit (20),
:only (a list of \"subject\", \"monologue\", \"diff\")."
  (amacs--call-sync 'history_search (list query options)))

;;;; Threads

(defun agent-create-thread (id &rest options)
  "Open thread ID; OPTIONS are :concern (a string) and :buffers (a list).
At most three threads may be open.  The new thread becomes active only
when no thread is."
  (amacs--call-sync 'thread_create (list id options)))

(defun agent-switch-thread (id)
  "Make thread ID the active one; its buffers and skills load next tick."
  (amacs--call-sync 'thread_switch (list id)))

(defun agent-complete-thread (id &rest options)
  "Complete thread ID; OPTIONS are :evidence (data) and :learned (a string).
The completed thread stays searchable in long-term memory."
  (amacs--call-sync 'thread_complete (list id options)))

(defun agent-thread-add-buffer (id buffer)
  "Add BUFFER (a buffer name or a file path) to thread ID."
  (amacs--call-sync 'thread_add_buffer (list id buffer)))

(defun agent-thread-remove-buffer (id buffer)
  "Remove BUFFER from thread ID."
  (amacs--call-sync 'thread_remove_buffer (list id buffer)))

;;;; Skills

(defun agent-list-available-skills ()
  "Return the skills that may be bound: name, description and kind each."
  (amacs--call-sync 'skills_list nil))

(defun agent-read-skill (skill)
  "Return SKILL's text now, as a plist of name, description, kind and text.
It needs no thread and binds nothing: the text is in this eval's result."
  (amacs--call-sync 'skill_read (list skill)))

(defun agent-bind-skill-to-thread (skill &optional thread)
  "Bind SKILL to THREAD (default: the active thread).
Its text appears in the context while that thread is active."
  (amacs--call-sync 'skill_bind (list skill thread)))

(defun agent-unbind-skill-from-thread (skill &optional thread)
  "Unbind SKILL from THREAD (default: the active thread)."
  (amacs--call-sync 'skill_unbind (list skill thread)))

;;;; Agents and the World (ARCHITECTURE.md, Agent and World)

(defun amacs--agent-call (method &rest args)
  "Call agent METHOD with ARGS from the eval that is running.
Only the eval's id goes with them: the server knows which agent that
eval runs for.  Outside any eval, where Emacs saw the call come from
\(`amacs--call-origin') goes in its place: a key of the person's acts
for the primary, a timer or hook an eval left is refused.  A talk the
call started is noted in `amacs--eval-talks', with who answers it.
The person's call (outside any eval) is answered with each memory
address as the person reads it, without its <EOT>s; the agent's keeps
them, to pass back.  Either form is taken as an argument; a refusal
the person gets says the addresses it names as the person reads them."
  (let ((value (condition-case err
                   (amacs--call-sync method (cons (or amacs-current-eval (amacs--call-origin)) args))
                 (amacs-remote-error
                  (signal (car err) (if amacs-current-eval (cdr err) (amacs--for-person-value (cdr err))))))))
    (amacs--note-talk value)
    (if amacs-current-eval value (amacs--for-person-value value))))

(defun amacs--for-person-value (value)
  "Return VALUE with the memory addresses in its strings without <EOT>s.
Each string is as `amacs-shell--for-person' gives it to the person."
  (cond ((stringp value) (amacs-shell--for-person value))
        ((consp value) (cons (amacs--for-person-value (car value)) (amacs--for-person-value (cdr value))))
        ((vectorp value) (vconcat (mapcar #'amacs--for-person-value value)))
        (t value)))

(defun amacs--note-talk (value)
  "Note in `amacs--eval-talks' the talk VALUE names, if any, and who answers it.
VALUE is what the server answered an agent call: a task's handle, a
talk's :to, or the viewpoints asked."
  (let ((talk-id (and (consp value) (plist-get value :talk-id))))
    (when (integerp talk-id)
      (let* ((to (plist-get value :to))
             (viewpoints (plist-get value :viewpoints))
             (who (cond ((stringp (plist-get value :handle)) (plist-get value :handle))
                        ((equal to "user") "you")
                        ((stringp to) to)
                        ((and viewpoints (listp viewpoints))
                         (mapconcat (lambda (v) (format "%s" v)) viewpoints ", "))
                        (t (format "talk %d" talk-id)))))
        (push (cons talk-id who) amacs--eval-talks)))))

(defun agent-task (template prompt &rest options)
  "Start a Task from skill TEMPLATE with PROMPT and return its handle at once.
The handle is a plist with :handle and :talk-id; the task's final reply
arrives later as an event.  OPTIONS: :allowed (a list of actions),
:request-input (talk to the person in the shell until done), :tools (the
MCP tools it may call) and :compulsions (templates of compulsions that
watch it from its first step)."
  (amacs--agent-call 'agent_task template prompt options))

(defun agent-viewpoint (name template)
  "Start a persistent Viewpoint called NAME from skill TEMPLATE."
  (amacs--agent-call 'agent_viewpoint name template))

(defun agent-consider (prompt)
  "Ask each viewpoint in turn about PROMPT; each hears the others' comments.
Returns at once; the list of comments arrives as an event."
  (amacs--agent-call 'agent_consider prompt))

(defun agent-discard (name)
  "End the viewpoint NAME; the others hear that it left."
  (amacs--agent-call 'agent_discard name))

(defun agent-compulsion (template &optional prompt)
  "Attach a Compulsion from skill TEMPLATE, with PROMPT, to this agent.
It sees every result and every action, and may block actions."
  (amacs--agent-call 'agent_compulsion template prompt))

(defun agent-quit ()
  "End this compulsion (only a compulsion may call it)."
  (amacs--agent-call 'agent_quit))

(defun agent-talk-user (text)
  "Show TEXT to the person; return the TalkId their reply will carry."
  (plist-get (amacs--agent-call 'talk_user text) :talk-id))

(defun agent-talk-agent (agent text)
  "Send TEXT to AGENT (an id or a viewpoint name); return the TalkId."
  (plist-get (amacs--agent-call 'talk_agent agent text) :talk-id))

(defun agent-talk-brain (brain text)
  "Send TEXT to BRAIN, one of this agent's own subagents; return the TalkId."
  (plist-get (amacs--agent-call 'talk_brain brain text) :talk-id))

(defun agent-talk-log (text)
  "Write TEXT to the transcript log; return the TalkId."
  (plist-get (amacs--agent-call 'talk_log text) :talk-id))

(defun agent-wait-for (talk-ids &rest options)
  "After this eval, sleep until replies to all TALK-IDS (one or a list) arrive.
TALK-IDS must come from agent-talk-* or agent-task calls in the same eval.
OPTIONS: :timeout seconds (then a Time event wakes the agent).
The wait is noted in `amacs--eval-wait', so the shell can say whom
the agent waits for."
  (let ((value (amacs--agent-call 'wait_for talk-ids options)))
    (setq amacs--eval-wait (list :talk-ids (append (plist-get value :waiting-for) nil)
                                 :timeout (plist-get value :timeout)))
    value))

(defun agent-list-agents ()
  "Return the live agents: id, type, template, state and cost each."
  (amacs--agent-call 'agents_list))

(defun agent-notify (text &rest options)
  "Share TEXT with this agent's viewpoints without asking for a reply.
OPTIONS: :to NAME shares it with the viewpoint NAME only."
  (amacs--agent-call 'agent_notify text options))

(defun agent-pause (agent)
  "Pause AGENT (an id) until `agent-resume': no model call meanwhile.
The primary may pause any agent, an agent only its own subagents;
a compulsion obeys no agent (only it ends itself, with `agent-quit')."
  (amacs--agent-call 'agent_control "pause" agent))

(defun agent-resume (agent)
  "Let the paused AGENT (an id) go on."
  (amacs--agent-call 'agent_control "resume" agent))

(defun agent-cancel (agent)
  "Cancel AGENT (an id) and every subagent below it, now.
Its model call and its eval chain end; its transcript says it was cancelled."
  (amacs--agent-call 'agent_control "cancel" agent))

;;;; MCP tools (the World's tools, configured in AMACS_HOME/mcp.json)

(defcustom amacs-tool-call-wait 120
  "Seconds an `agent-tool' call waits for the server at most.
The server gives up a tool call after the server's own timeout
\(`timeout' in mcp.json, 20 s by default); this is only the
longest Emacs waits for its answer."
  :type 'number
  :group 'amacs)

(defvar amacs-tool-call-functions nil
  "Functions called after each `agent-tool' call, in the eval that made it.
Each is called with NAME, ARGUMENTS, VALUE, ERROR and SECONDS: the
tool's \"SERVER/TOOL\", the plist it was given, its value (nil on
error), the error message (nil on success) and how long it took.")

(defun agent-tool (name &rest arguments)
  "Call the MCP tool NAME, \"SERVER/TOOL\", with ARGUMENTS; return its result.
ARGUMENTS are a plist, :name value ..., checked against the tool's
input schema before the call (an error names the argument).
The result is elisp data: structured content as a plist, text as
a string, an image or resource as a plist of its :mime-type and
size.  A result the tool marks as an error, a refused or blocked
call, a timeout and a server that is down all signal an error.
Example: (agent-tool \"time/get_current_time\" :timezone \"UTC\")."
  (let ((start (float-time)) value failure)
    (condition-case err
        (setq value (let ((amacs-sync-call-timeout (max amacs-sync-call-timeout amacs-tool-call-wait)))
                      (amacs--agent-call 'agent_tool name arguments)))
      (error (setq failure err)))
    (run-hook-with-args 'amacs-tool-call-functions name arguments value
                        (and failure (amacs-error-message failure)) (- (float-time) start))
    (if failure (signal (car failure) (cdr failure)) value)))

(provide 'amacs-agent)
;;; amacs-agent.el ends here
