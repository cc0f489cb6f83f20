;;; amacs-test-helpers.el --- Helpers the ERT tests share -*- lexical-binding: t -*-

;;; Commentary:

;; A connection of the tests' own, with its slots set, in effect
;; while a test runs; the hello status of the current connection,
;; faked for a test.

;;; Code:

(require 'cl-lib)
(require 'amacs-transport)

(defmacro amacs-test-with-connection (var slots &rest body)
  "Run BODY with VAR a fresh connection, in effect, its SLOTS set.
SLOTS is a plist of slot keywords and values, as `amacs--make-connection'
takes them.  The connection's home is a new temporary folder, and
`amacs-home' names it: the connection is the only one the test knows."
  (declare (indent 2))
  `(let* ((amacs-home (make-temp-file "amacs-test-home" t))
          (amacs--connections nil)
          (,var (apply #'amacs--make-connection :home (directory-file-name amacs-home) (list ,@slots))))
     (push ,var amacs--connections)
     (amacs-with-connection ,var ,@body)))

(defmacro amacs-test-with-status (status &rest body)
  "Run BODY with STATUS the current connection's hello status."
  (declare (indent 1))
  `(cl-letf (((amacs-connection-status (amacs-current-connection)) ,status))
     ,@body))

(provide 'amacs-test-helpers)
;;; amacs-test-helpers.el ends here
