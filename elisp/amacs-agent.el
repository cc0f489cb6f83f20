;;; amacs-agent.el --- Functions the agent calls from its eval -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1") (epc "0.1.1"))
;; Keywords: tools, ai
;; URL: https://example.invalid/amacs

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The agent-facing API keeps the specs' `agent-' names.  These run
;; inside the agent's eval and need an answer now, so they use the fast
;; synchronous call (`amacs--call-sync').  A refusal from the server
;; (a harness-owned field, a bad value) is signalled as an error, which
;; the agent then sees as its eval result.

;;; Code:

(require 'amacs-transport)

(defun agent-consciousness ()
  "Return the agent's consciousness alist (RFC v4 §3.1)."
  (car (read-from-string (amacs--call-sync 'consciousness nil))))

(defun agent-set-consciousness (field value)
  "Set consciousness FIELD (a symbol) to VALUE; return the new value.
Harness-owned fields are refused with an error: identity, the tick
and time, budget, and the last eval result."
  (amacs--call-sync 'set_consciousness
                    (list (if (symbolp field) (symbol-name field) field) value)))

(provide 'amacs-agent)
;;; amacs-agent.el ends here
