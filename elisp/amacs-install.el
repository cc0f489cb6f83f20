;;; amacs-install.el --- Install the AMACS server into a venv -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; M-x amacs-install-server makes a Python virtual environment,
;; `amacs-server-venv' (amacs/venv in `user-emacs-directory'), and
;; installs the AMACS server into it from the checkout this elisp came
;; from: `python3 -m venv DIR', then `DIR/bin/python -m pip install
;; CHECKOUT'.  Both run asynchronously; their output streams into
;; `*amacs-install*', whose last line says whether it worked and what to
;; do next.  Run it again to update the server from the checkout; with
;; a prefix argument the venv is made afresh.
;;
;; The default `amacs-server-command' (amacs-transport.el) finds the
;; venv's `amacs-server'.  This file needs nothing outside Emacs (not
;; even epc), so it works before anything else of AMACS is set up.

;;; Code:

(require 'cl-lib)

(defconst amacs-install--root
  (file-name-directory
   (directory-file-name
    (file-name-directory (or load-file-name buffer-file-name default-directory))))
  "The checkout this elisp came from: the folder above elisp/.")

(defcustom amacs-server-venv nil
  "The Python venv `amacs-install-server' installs the server into.
nil means amacs/venv in `user-emacs-directory'.  The default
`amacs-server-command' uses its bin/amacs-server when there is no
checkout .venv."
  :type '(choice (const :tag "amacs/venv in user-emacs-directory" nil) directory)
  :group 'amacs)

(defcustom amacs-install-server-python "python3"
  "The Python (3.11 or later) `amacs-install-server' makes the venv with.
A program name looked up on PATH, or a file name."
  :type 'string
  :group 'amacs)

(defcustom amacs-install-server-source nil
  "The AMACS checkout `amacs-install-server' installs from.
nil means the checkout this elisp came from (the folder above
elisp/).  It must hold pyproject.toml."
  :type '(choice (const :tag "The checkout of this elisp" nil) directory)
  :group 'amacs)

(defcustom amacs-install-server-pip-args nil
  "Extra arguments for `pip install', before the checkout."
  :type '(repeat string)
  :group 'amacs)

(defvar amacs-install-server-functions nil
  "Functions called when `amacs-install-server' ends.
Each gets one argument: non-nil when the server was installed.")

(defvar amacs-install-server-status nil
  "Where the last `amacs-install-server' is: nil, `running', `done' or `failed'.")

(defvar amacs-install--process nil
  "The process of the install under way, or nil.")

(defconst amacs-install--buffer "*amacs-install*"
  "The buffer that shows the install's progress.")

(defvar amacs-server-command)
(declare-function amacs--default-server-command "amacs-transport")
(declare-function amacs-live-p "amacs-transport")

(defun amacs-install--venv ()
  "Return the absolute name of the venv folder, without a final slash."
  (directory-file-name
   (expand-file-name (or amacs-server-venv (locate-user-emacs-file "amacs/venv")))))

(defun amacs-install--server-program ()
  "Return the venv's amacs-server program (which may not exist)."
  (expand-file-name "bin/amacs-server" (amacs-install--venv)))

(defun amacs-install--source ()
  "Return the checkout to install from, without a final slash."
  (directory-file-name (expand-file-name (or amacs-install-server-source amacs-install--root))))

(defun amacs-install--check-python (python)
  "Signal a `user-error' unless PYTHON can make a venv; return its file name."
  (let ((program (executable-find python)))
    (unless program
      (user-error "Cannot install the AMACS server: cannot find %s (`amacs-install-server-python'); install Python 3.11 or later (Debian: apt-get install python3 python3-venv)"
                  python))
    (pcase (let ((default-directory temporary-file-directory))
             (call-process program nil nil nil "-c"
                           (concat "import sys\n"
                                   "if sys.version_info < (3, 11): sys.exit(2)\n"
                                   "try:\n    import venv, ensurepip\n"
                                   "except ImportError:\n    sys.exit(3)\n")))
      (0 program)
      (2 (user-error "Cannot install the AMACS server: %s is older than Python 3.11; set `amacs-install-server-python' to a newer one"
                     program))
      (3 (user-error "Cannot install the AMACS server: %s has no venv module; on Debian or Ubuntu: apt-get install python3-venv"
                     program))
      (code (user-error "Cannot install the AMACS server: %s does not run (%s)" program code)))))

(defun amacs-install--insert (text)
  "Insert TEXT at the end of the install buffer; windows at its end follow."
  (let ((buffer (get-buffer amacs-install--buffer)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let* ((inhibit-read-only t)
               (end (point-max))
               (follow (cl-remove-if-not (lambda (window) (= (window-point window) end))
                                         (get-buffer-window-list buffer nil t)))
               (at-end (= (point) end)))
          (save-excursion
            (goto-char end)
            (insert text))
          (when at-end (goto-char (point-max)))
          (dolist (window follow)
            (set-window-point window (point-max))))))))

(defun amacs-install--filter (_process output)
  "Show OUTPUT of an install step in the install buffer."
  (amacs-install--insert (string-replace "\r" "" output)))

(defun amacs-install--run (command then)
  "Run COMMAND (a list) into the install buffer; call THEN with its exit code."
  (amacs-install--insert (format "$ %s\n" (mapconcat #'shell-quote-argument command " ")))
  (setq amacs-install--process
        (let ((default-directory temporary-file-directory)
              (process-environment (append '("PIP_PROGRESS_BAR=off" "PYTHONUNBUFFERED=1")
                                           process-environment)))
          (make-process
           :name "amacs-install"
           :command command
           :connection-type 'pipe
           :noquery t
           :filter #'amacs-install--filter
           :sentinel (lambda (process _event)
                       (unless (process-live-p process)
                         (funcall then (process-exit-status process))))))))

(defun amacs-install--finish (ok text)
  "End the install: OK non-nil when it worked; TEXT is its last line."
  (setq amacs-install--process nil
        amacs-install-server-status (if ok 'done 'failed))
  (amacs-install--insert (concat "\n" text "\n"))
  (message "%s" text)
  (run-hook-with-args 'amacs-install-server-functions ok))

(defun amacs-install--use (before)
  "Point `amacs-server-command' at the new server unless the user chose one.
BEFORE is the default command when the install began (nil when
amacs-transport was not loaded).  Return a sentence saying what to do next."
  (cond
   ((not (fboundp 'amacs--default-server-command))
    (let ((missing (cl-remove-if #'locate-library '("epc" "magit-section"))))
      (if missing
          (format "Emacs still needs the package%s %s (Debian: apt-get install %s; else package-install from MELPA); then M-x amacs-shell."
                  (if (cdr missing) "s" "") (mapconcat #'identity missing " and ")
                  (mapconcat (lambda (name) (concat "elpa-" name)) missing " "))
        "M-x amacs-shell starts it.")))
   ((equal amacs-server-command before)
    (setq amacs-server-command (amacs--default-server-command))
    (format "`amacs-server-command' is now %S for this session; %s"
            amacs-server-command
            (if (amacs-live-p)
                "M-x amacs-restart restarts the server with it."
              "M-x amacs-shell starts it.")))
   (t
    (format "`amacs-server-command' is customized (%S): set it to (%S) to use this server."
            amacs-server-command (amacs-install--server-program)))))

;;;###autoload
(defun amacs-install-server (&optional fresh)
  "Install the AMACS server into `amacs-server-venv', asynchronously.
Make the venv with `amacs-install-server-python' (unless it exists;
with a prefix argument FRESH, make it afresh), then pip install the
checkout `amacs-install-server-source' into it (when that has no
pyproject.toml, as when this elisp was installed with package.el,
ask for the checkout).  The output streams into the buffer
*amacs-install*.  When it is done, set
`amacs-server-command' for this session, unless it was customized.
Return the process of the first step; `amacs-install-server-status'
and `amacs-install-server-functions' say when all is done."
  (interactive "P")
  (when (process-live-p amacs-install--process)
    (user-error "The AMACS server is being installed already: see %s" amacs-install--buffer))
  (let* ((source (amacs-install--source))
         (venv (amacs-install--venv))
         (python (amacs-install--check-python amacs-install-server-python))
         (venv-python (expand-file-name "bin/python" venv))
         (pip (append (list venv-python "-m" "pip" "install")
                      amacs-install-server-pip-args (list source)))
         (before (and (fboundp 'amacs--default-server-command) (amacs--default-server-command)))
         (again (concat "Fix that, then M-x amacs-install-server again "
                        "(C-u M-x amacs-install-server makes the venv afresh).")))
    (when (and (not (file-exists-p (expand-file-name "pyproject.toml" source)))
               (called-interactively-p 'interactive))
      ;; Installed with package.el, the elisp is a copy: ask where the checkout is.
      (setq source (directory-file-name
                    (expand-file-name
                     (read-directory-name "AMACS checkout to install the server from: " nil nil t)))
            pip (append (butlast pip) (list source))))
    (unless (file-exists-p (expand-file-name "pyproject.toml" source))
      (user-error "Cannot install the AMACS server: %s has no pyproject.toml; set `amacs-install-server-source' to an AMACS checkout"
                  source))
    (with-current-buffer (get-buffer-create amacs-install--buffer)
      (let ((inhibit-read-only t))
        (erase-buffer))
      (special-mode)
      (setq-local default-directory (file-name-as-directory source)))
    (display-buffer amacs-install--buffer)
    (amacs-install--insert (format "Installing the AMACS server from %s into %s\n\n" source venv))
    (setq amacs-install-server-status 'running)
    (let ((install
           (lambda ()
             (amacs-install--run
              pip
              (lambda (code)
                (if (eq code 0)
                    (amacs-install--finish
                     t (format "Done: the AMACS server is installed (%s). %s"
                               (amacs-install--server-program) (amacs-install--use before)))
                  (amacs-install--finish
                   nil (format "Failed: pip install exited with code %s (its output is above). %s"
                               code again))))))))
      (if (and (not fresh) (file-executable-p venv-python))
          (progn (amacs-install--insert (format "Using the venv %s\n" venv))
                 (funcall install))
        (make-directory (file-name-directory venv) t)
        (amacs-install--run
         (append (list python "-m" "venv") (and fresh '("--clear")) (list venv))
         (lambda (code)
           (if (eq code 0)
               (funcall install)
             (amacs-install--finish
              nil (format "Failed: %s -m venv exited with code %s (its output is above; on Debian or Ubuntu: apt-get install python3-venv). %s"
                          python code again)))))))
    amacs-install--process))

(provide 'amacs-install)
;;; amacs-install.el ends here
