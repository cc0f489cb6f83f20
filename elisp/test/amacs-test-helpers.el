;;; amacs-test-helpers.el --- Helpers the ERT tests share -*- lexical-binding: t -*-

;;; Commentary:

;; A connection of the tests' own, with its slots set, in effect
;; while a test runs; the hello status of the current connection,
;; faked for a test.

;;; Code:

(require 'cl-lib)
(require 'seq)
(require 'amacs-transport)

(defun amacs-test--connection (home slots)
  "Return a new connection of HOME with SLOTS set, each in the part that has it.
SLOTS is a plist of slot keywords and values of its parts (`amacs-wire',
`amacs-life', `amacs-ui'): (:process P :on-ready FNS)."
  (let ((connection (amacs--make-connection :home home)))
    (while slots
      (let* ((slot (intern (substring (symbol-name (pop slots)) 1)))
             (value (pop slots))
             (part (or (seq-find (lambda (part) (assq slot (cl-struct-slot-info part)))
                                 '(amacs-wire amacs-life amacs-ui))
                       (error "No part of a connection has the slot %s" slot)))
             (object (funcall (intern (format "amacs-connection-%s" (substring (symbol-name part) 6)))
                              connection)))
        (setf (cl-struct-slot-value part slot object) value)))
    connection))

(defmacro amacs-test-with-connection (var slots &rest body)
  "Run BODY with VAR a fresh connection, in effect, its SLOTS set.
SLOTS is a plist of slot keywords and values of the connection's parts,
as `amacs-test--connection' takes them.  The connection's home is a new
temporary folder, and `amacs-home' names it: the connection is the only
one the test knows."
  (declare (indent 2))
  `(let* ((amacs-home (make-temp-file "amacs-test-home" t))
          (amacs--connections nil)
          (,var (amacs-test--connection (directory-file-name amacs-home) (list ,@slots))))
     (push ,var amacs--connections)
     (amacs-with-connection ,var ,@body)))

(defmacro amacs-test-with-status (status &rest body)
  "Run BODY with STATUS the current connection's hello status."
  (declare (indent 1))
  `(cl-letf (((amacs-wire-status (amacs-connection-wire (amacs-current-connection))) ,status))
     ,@body))

(provide 'amacs-test-helpers)
;;; amacs-test-helpers.el ends here
