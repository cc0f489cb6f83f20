;;; amacs-settings.el --- The agent's settings, sent to its server -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; What the person sets for the agent in Emacs: the eval time limit,
;; the steps of one turn, the price table (sent to the server at hello,
;; `amacs--settings', and again before the person's next input when one
;; changed since, however it was set: `amacs--send-changed-settings').  What the person chooses for one home (model,
;; endpoint, budget) is kept by its connection: `amacs-chosen'.

;;; Code:

(defgroup amacs nil
  "AMACS: an Emacs-native LLM agent."
  :group 'tools
  :prefix "amacs-")

(defcustom amacs-eval-timeout 30
  "Seconds the agent's eval may run before it is stopped.
A new value, however set (`setopt', customize, `set-variable', `setq'),
applies from the turn that your next input starts."
  :type 'number
  :group 'amacs)

(defcustom amacs-max-steps 8
  "Ticks one human turn may run while the agent keeps evaluating.
The header shows which of them the turn is on (\"tick 3 of 8\").  A new
value, however set (`setopt', customize, `set-variable', `setq'),
applies from the turn that your next input starts."
  :type 'integer
  :group 'amacs)

(defcustom amacs-price-table nil
  "Model prices in US dollars per million tokens, overriding the server's own.
Each entry is (MODEL-PREFIX INPUT OUTPUT CACHE-WRITE CACHE-READ); the
longest prefix of the model's name that matches wins.  A new value,
however set, applies from the turn that your next input starts."
  :type '(repeat (list (string :tag "Model prefix") (number :tag "Input") (number :tag "Output")
                       (number :tag "Cache write") (number :tag "Cache read")))
  :group 'amacs)


(defun amacs--settings ()
  "Return the plist of settings sent to the server at hello.
The global values: one made local to a buffer is not the person's setting."
  (list :eval-timeout (default-value 'amacs-eval-timeout) :max-steps (default-value 'amacs-max-steps)
        :prices (mapcar (lambda (entry)
                          (list :model (nth 0 entry) :input (nth 1 entry) :output (nth 2 entry)
                                :cache-write (nth 3 entry) :cache-read (nth 4 entry)))
                        (default-value 'amacs-price-table))
        :read-before-write (if (bound-and-true-p amacs-read-before-write) "on" "off")))

(provide 'amacs-settings)
;;; amacs-settings.el ends here
