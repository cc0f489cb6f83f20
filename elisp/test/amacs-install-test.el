;;; amacs-install-test.el --- ERT tests of M-x amacs-install-server -*- lexical-binding: t -*-

;;; Commentary:

;; Issue 14 (installs like its peers): `amacs-install-server' says
;; clearly what is missing before it starts (Python, its venv module,
;; the checkout's pyproject.toml), and the default server command finds
;; the checkout's .venv, else the installed venv, else PATH.  The
;; install itself is tested end to end in tests/e2e/test_install_server.py.

;;; Code:

(require 'ert)
(require 'amacs-install)
(require 'amacs-transport)

(defun amacs-install-test--script (file text)
  "Write an executable shell script FILE whose body is TEXT; return FILE."
  (make-directory (file-name-directory file) t)
  (with-temp-file file (insert "#!/bin/sh\n" text "\n"))
  (set-file-modes file #o755)
  file)

(defmacro amacs-install-test--in-temp (var &rest body)
  "Run BODY with VAR a fresh temporary folder, deleted afterwards."
  (declare (indent 1))
  `(let ((,var (file-name-as-directory (make-temp-file "amacs-install-test" t))))
     (unwind-protect (progn ,@body)
       (delete-directory ,var t))))

(ert-deftest amacs-install-test-missing-python ()
  "No Python: a `user-error' that names it and says what to install; nothing runs."
  (let* ((amacs-install-server-python "amacs-no-such-python3")
         (amacs-install--process nil)
         (amacs-install-server-status nil)
         (err (should-error (amacs-install-server) :type 'user-error)))
    (should (string-match-p "cannot find amacs-no-such-python3 " (cadr err)))
    (should (string-match-p "install Python 3.11 or later" (cadr err)))
    (should (string-match-p "apt-get install python3 python3-venv" (cadr err)))
    (should-not amacs-install--process)
    (should-not amacs-install-server-status)))

(ert-deftest amacs-install-test-missing-venv-module ()
  "A Python without venv/ensurepip (Debian without python3-venv): say what to install."
  (amacs-install-test--in-temp dir
    (let* ((amacs-install-server-python
            (amacs-install-test--script (expand-file-name "python3" dir) "exit 3"))
           (amacs-install--process nil)
           (err (should-error (amacs-install-server) :type 'user-error)))
      (should (string-match-p "has no venv module" (cadr err)))
      (should (string-match-p "apt-get install python3-venv" (cadr err)))
      (should-not amacs-install--process))))

(ert-deftest amacs-install-test-old-python ()
  "A Python older than 3.11: say so."
  (amacs-install-test--in-temp dir
    (let* ((amacs-install-server-python
            (amacs-install-test--script (expand-file-name "python3" dir) "exit 2"))
           (err (should-error (amacs-install-server) :type 'user-error)))
      (should (string-match-p "older than Python 3.11" (cadr err))))))

(ert-deftest amacs-install-test-no-pyproject ()
  "A source folder without pyproject.toml: say so, and where to point instead."
  (skip-unless (executable-find "python3"))
  (amacs-install-test--in-temp dir
    (let* ((amacs-install-server-source dir)
           (amacs-server-venv (expand-file-name "venv" dir))
           (amacs-install--process nil)
           (err (should-error (amacs-install-server) :type 'user-error)))
      (should (string-match-p "has no pyproject.toml" (cadr err)))
      (should (string-match-p "amacs-install-server-source" (cadr err)))
      (should-not (file-exists-p (expand-file-name "venv" dir))))))

(ert-deftest amacs-install-test-venv-default-location ()
  "The venv defaults to amacs/venv in `user-emacs-directory', read when used."
  (amacs-install-test--in-temp dir
    (let ((user-emacs-directory dir)
          (amacs-server-venv nil))
      (should (equal (amacs-install--venv) (expand-file-name "amacs/venv" dir)))
      (should (equal (amacs-install--server-program)
                     (expand-file-name "amacs/venv/bin/amacs-server" dir))))))

(ert-deftest amacs-install-test-default-server-command-order ()
  "The checkout's .venv, else the installed venv, else amacs-server on PATH."
  (amacs-install-test--in-temp dir
    (let* ((amacs--root (expand-file-name "checkout/" dir))
           (user-emacs-directory (expand-file-name "emacs.d/" dir))
           (amacs-server-venv nil)
           (bin (expand-file-name "bin/" dir))
           (exec-path (list bin))
           (on-path (expand-file-name "amacs-server" bin))
           (installed (expand-file-name "amacs/venv/bin/amacs-server" user-emacs-directory))
           (checkout-python (expand-file-name ".venv/bin/python" amacs--root)))
      (make-directory amacs--root t)
      ;; Nothing anywhere: the bare name, which fails to start with a message.
      (should (equal (amacs--default-server-command) '("amacs-server")))
      (amacs-install-test--script on-path "exit 0")
      (should (equal (amacs--default-server-command) (list on-path)))
      (amacs-install-test--script installed "exit 0")
      (should (equal (amacs--default-server-command) (list installed)))
      (amacs-install-test--script checkout-python "exit 0")
      (should (equal (amacs--default-server-command)
                     (list checkout-python "-m" "amacs_server"))))))

(provide 'amacs-install-test)
;;; amacs-install-test.el ends here
