;;; amacs-research.el --- Reports of AMACS experiments -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers

;; This file is not part of GNU Emacs.

;;; Commentary:

;; An experiment (`amacs-server experiment SPEC', see docs/research.md,
;; Experiments) leaves its runs in a folder, RUNS_DIR.  M-x amacs-report
;; asks for that folder, runs `amacs-server report RUNS_DIR' (the program
;; of `amacs-server-command') without blocking Emacs, shows its output in
;; `*amacs-report*', and opens RUNS_DIR/report.html in a browser with
;; `browse-url-of-file'.  Where no browser can start (a terminal Emacs
;; with no display, and `browse-url-browser-function' left to find one)
;; it says so, and where the report is, and puts its path in the kill
;; ring: the report's plots need JavaScript, so it does not use eww.
;; The hub links to the last report.

;;; Code:

(require 'browse-url)
(require 'cl-lib)
(require 'amacs-server)

(defcustom amacs-runs-directory nil
  "Folder of an experiment's runs that \\[amacs-report] offers, or nil.
The folder of the last report comes first; without either, the newest
runs folder under the checkout's experiments/ (see
`amacs-report-newest-runs-directory')."
  :type '(choice (const :tag "None" nil) directory)
  :group 'amacs)

(defvar amacs-report-last-directory nil
  "The runs folder of the last \\[amacs-report], or nil.")

(defconst amacs-report-buffer-name "*amacs-report*"
  "Name of the buffer that shows the report command's output.")

(defvar amacs-report-finished-hook nil
  "Hook run when a report command ends, with its runs folder and exit status.")

(defun amacs-report-command (runs-dir &optional server-command)
  "Return the command that writes the report of RUNS-DIR, as a list.
It is SERVER-COMMAND (default `amacs-server-command') followed by
report and the absolute RUNS-DIR."
  (append (or server-command amacs-server-command)
          (list "report" (directory-file-name (expand-file-name runs-dir)))))

(defun amacs-report-file (runs-dir)
  "Return the report file of RUNS-DIR (it may not exist)."
  (expand-file-name "report.html" runs-dir))

(defun amacs-report-last-file ()
  "Return the last report file that exists, or nil.
The one in `amacs-report-last-directory', else in
`amacs-runs-directory'."
  (cl-some (lambda (dir)
             (and dir (file-exists-p (amacs-report-file dir)) (amacs-report-file dir)))
           (list amacs-report-last-directory amacs-runs-directory)))

(defconst amacs-report--experiments-directory
  (let ((here (or load-file-name buffer-file-name)))
    (and here (expand-file-name "../experiments/" (file-name-directory (file-truename here)))))
  "The experiments/ folder of the checkout this file was loaded from, or nil.")

(defconst amacs-report--no-javascript '(eww-browse-url browse-url-emacs browse-url-text-emacs)
  "Values of `browse-url-browser-function' that cannot show the report.
Its plots need JavaScript, which these have not.")

(defun amacs-report-browser-available-p ()
  "Return non-nil when `browse-url-of-file' can start a browser here.
A function of `browse-url-browser-function' set by the person counts
\(unless it is one of `amacs-report--no-javascript'); the default one
needs, on GNU/Linux, a display and a browser program it knows."
  (let ((fn browse-url-browser-function))
    (cond ((and (symbolp fn) (memq fn amacs-report--no-javascript)) nil)
          ((not (eq fn 'browse-url-default-browser)) t)
          ((memq system-type '(windows-nt ms-dos cygwin darwin)) t)
          ((not (or (display-graphic-p) (getenv "DISPLAY") (getenv "WAYLAND_DISPLAY"))) nil)
          (t (and (cl-some #'executable-find
                           (list "xdg-open" browse-url-mozilla-program browse-url-firefox-program
                                 browse-url-chromium-program browse-url-kde-program
                                 browse-url-chrome-program))
                  t)))))

(defun amacs-report-browse (file)
  "Open the report FILE in a browser, or say where it is when none can start.
Without a browser, say so in the echo area and in `*amacs-report*',
and put FILE's path in the kill ring.  Return FILE."
  (if (amacs-report-browser-available-p)
      (progn (amacs-report--insert (get-buffer-create amacs-report-buffer-name)
                                   (format "Report written: %s; opening it in a browser\n" file))
             (message "AMACS: opening %s in a browser" (abbreviate-file-name file))
             (browse-url-of-file file))
    (let ((text (format "Report written: %s — open it in a browser (no browser here: set `%s')"
                        file 'browse-url-browser-function)))
      (kill-new file)
      (amacs-report--insert (get-buffer-create amacs-report-buffer-name)
                            (concat text "\nIts path is in the kill ring.\n"))
      (message "%s" text)))
  file)

(defun amacs-report-open (runs-dir)
  "Open the report of RUNS-DIR in a browser (see `amacs-report-browse').
Signal a `user-error' when RUNS-DIR has no report yet."
  (interactive (list (amacs-report--read-directory)))
  (let ((file (amacs-report-file runs-dir)))
    (unless (file-exists-p file)
      (user-error "No report in %s: M-x amacs-report writes one" (abbreviate-file-name runs-dir)))
    (amacs-report-browse file)))

(defun amacs-report-newest-runs-directory (&optional experiments)
  "Return the newest folder of run data under EXPERIMENTS, or nil.
EXPERIMENTS defaults to the checkout's experiments/ folder; such a
folder is EXPERIMENTS/*/runs/NAME/ holding an experiment.toml (as
`amacs-server experiment' leaves it), the newest by modification time."
  (let* ((root (or experiments amacs-report--experiments-directory))
         (found (and root (file-directory-p root)
                     (file-expand-wildcards (expand-file-name "*/runs/*/experiment.toml" root)))))
    (when found
      (file-name-directory
       (car (sort found (lambda (a b)
                          (time-less-p (file-attribute-modification-time (file-attributes b))
                                       (file-attribute-modification-time (file-attributes a))))))))))

(defun amacs-report--start-directory ()
  "Return the first folder offered by the prompt for the run data folder.
The last runs folder used, else `amacs-runs-directory', else the newest
runs folder under the checkout's experiments/, else `default-directory'."
  (or amacs-report-last-directory amacs-runs-directory (amacs-report-newest-runs-directory)
      default-directory))

(defun amacs-report--read-directory ()
  "Ask for the folder of an experiment's run data, starting at the last one."
  (let ((start (file-name-as-directory (expand-file-name (amacs-report--start-directory)))))
    (read-directory-name "Experiment runs folder: " start start t)))

(defun amacs-report--insert (buffer text)
  "Append TEXT to BUFFER, which is read-only."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (let ((inhibit-read-only t))
        (save-excursion
          (goto-char (point-max))
          (insert text))))))

(defun amacs-report--finished (proc runs-dir)
  "Say how the report process PROC for RUNS-DIR ended; open the report if written."
  (let ((status (process-exit-status proc))
        (buffer (process-buffer proc)))
    (if (and (zerop status) (file-exists-p (amacs-report-file runs-dir)))
        (progn
          (amacs-report--insert buffer "\nThe report command finished.\n")
          (amacs-report-open runs-dir))
      (amacs-report--insert buffer (format "\nThe report command failed (exit %s): see above.\n" status))
      (message "AMACS: the report of %s failed (exit %s); see %s"
               (abbreviate-file-name runs-dir) status amacs-report-buffer-name))
    (run-hook-with-args 'amacs-report-finished-hook runs-dir status)))

;;;###autoload
(defun amacs-report (runs-dir)
  "Write the report of the experiment in RUNS-DIR, then open it.
Start `amacs-server report RUNS-DIR' in the background, with its
output in the buffer `*amacs-report*'; when it has written
RUNS-DIR/report.html, open that with `browse-url-of-file', or,
where no browser can start, say where it is (see
`amacs-report-browse').  Return the process."
  (interactive (list (amacs-report--read-directory)))
  (let ((dir (file-name-as-directory (expand-file-name runs-dir)))
        (buffer (get-buffer-create amacs-report-buffer-name)))
    (unless (file-directory-p dir)
      (user-error "No folder %s" (abbreviate-file-name dir)))
    (setq amacs-report-last-directory dir)
    (let ((command (amacs-report-command dir)))
      (with-current-buffer buffer
        (special-mode)
        (let ((inhibit-read-only t))
          (erase-buffer)
          (insert (format "$ %s\n\n" (mapconcat #'shell-quote-argument command " ")))))
      (display-buffer buffer)
      (condition-case err
          (make-process :name "amacs-report" :buffer buffer :command command :noquery t
                        :connection-type 'pipe
                        :filter (lambda (proc text) (amacs-report--insert (process-buffer proc) text))
                        :sentinel (lambda (proc _event)
                                    (unless (process-live-p proc)
                                      (amacs-report--finished proc dir))))
        (file-error
         (amacs-report--insert buffer (format "Cannot run %s: %s\n" (car command) (error-message-string err)))
         (user-error "Cannot run %s: %s; customize `amacs-server-command'"
                     (car command) (error-message-string err)))))))

(provide 'amacs-research)
;;; amacs-research.el ends here
