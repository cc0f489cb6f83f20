;;; package-lint-batch.el --- Run package-lint on elisp/ with AMACS's exemption -*- lexical-binding: t -*-

;;; Commentary:

;; emacs -Q --batch -l scripts/package-lint-batch.el MAIN-FILE OTHER-FILE...
;;
;; Lints every file as part of the package whose main file is the first
;; one (only its headers count), and exits non-zero on any error or
;; warning but these:
;;
;; - The one documented exemption: the agent-facing API of
;;   amacs-agent.el keeps the specs' `agent-' names (see that file's
;;   commentary), so "doesn't start with package's prefix" is let through
;;   for names starting with `agent-' reported in amacs-agent.el.
;; - Not our code but the linter's age: package-lint 0.16 (Debian 12)
;;   believes no released Emacs is 28 or newer, and warns that requiring
;;   Emacs 28.1 makes the package uninstallable.  That warning is let
;;   through only when the Emacs running the check (a released one)
;;   satisfies the requirement.
;; - A missing fact, not a fault: AMACS has no public home yet, so
;;   amacs.el has no URL header rather than an invented one, and
;;   "Package should have a Homepage or URL header" is let through.  Add
;;   the URL header when there is one, and drop this.
;;
;; Beyond package-lint: every `(require \='FEATURE)' in the files is a
;; file of the package, part of Emacs, or listed in the main file's
;; Package-Requires (package-lint checks none of this).
;;
;; Offline there are no package archives: a dependency counts as
;; installable when package.el has it installed (the Debian packages
;; under /usr/share/emacs/site-lisp/elpa), at its installed version.

;;; Code:

(require 'package)
(add-to-list 'package-directory-list "/usr/share/emacs/site-lisp/elpa")
(package-initialize)
(require 'package-lint)

(defun amacs-lint--exempt-p (file err emacs-req)
  "Non-nil when ERR, reported in FILE, is let through (see Commentary).
ERR is (LINE COL TYPE MESSAGE); EMACS-REQ is the Emacs version the
main file requires, as a list, or nil."
  (let ((message (nth 3 err)))
    (or (and (equal (file-name-nondirectory file) "amacs-agent.el")
             (string-match-p "\\`\"agent-[^\"]*\" doesn't start with package's prefix \"amacs\"\\.\\'"
                             message))
        (and emacs-req
             (equal message "This makes the package uninstallable in all released Emacs versions.")
             (version-list-<= emacs-req (version-to-list emacs-version)))
        (equal message "Package should have a Homepage or URL header."))))

(defun amacs-lint--unlisted-requires (files reqs)
  "Features FILES require that are neither the package's, Emacs's, nor in REQS.
The package's files are those beside the first of FILES, its main file.
Return a list of (FILE . FEATURE)."
  (let ((own (mapcar #'file-name-base
                     (directory-files (file-name-directory (expand-file-name (car files)))
                                      nil "\\.el\\'")))
        (emacs-lisp (file-name-as-directory (expand-file-name "../lisp" data-directory)))
        unlisted)
    (dolist (file files)
      (with-temp-buffer
        (insert-file-contents file)
        (while (re-search-forward "(require '\\([^ )]+\\)" nil t)
          (let* ((feature (match-string 1))
                 (library (locate-library feature)))
            (unless (or (member feature own)
                        (assq (intern feature) reqs)
                        (and library (string-prefix-p emacs-lisp (file-truename library))))
              (push (cons (file-name-nondirectory file) feature) unlisted))))))
    (nreverse unlisted)))

(defun amacs-lint-files (files)
  "Lint FILES, the first one the main file; return non-nil when clean."
  (let* ((main (expand-file-name (car files)))
         (package-lint-main-file main)
         (text-quoting-style 'grave)
         (clean t) (agent 0) (other 0) reqs emacs-req)
    (unless package-archive-contents    ; offline: what is installed is installable
      (setq package-archive-contents (mapcar (lambda (entry) (cons (car entry) (cdr entry)))
                                             package-alist)))
    (with-temp-buffer
      (insert-file-contents main)
      (setq reqs (package-desc-reqs (package-buffer-info))
            emacs-req (cadr (assq 'emacs reqs))))
    (pcase-dolist (`(,file . ,feature) (amacs-lint--unlisted-requires files reqs))
      (setq clean nil)
      (message "%s: error: requires %s, which is not part of Emacs: list it in %s's Package-Requires"
               file feature (file-name-nondirectory main)))
    (dolist (file files)
      (with-temp-buffer
        (insert-file-contents (expand-file-name file) t)
        (emacs-lisp-mode)
        (dolist (err (package-lint-buffer))
          (if (amacs-lint--exempt-p file err emacs-req)
              (if (string-prefix-p "\"agent-" (nth 3 err))
                  (setq agent (1+ agent))
                (setq other (1+ other)))
            (setq clean nil)
            (message "%s:%d:%d: %s: %s" (file-name-nondirectory file)
                     (nth 0 err) (nth 1 err) (nth 2 err) (nth 3 err))))))
    (message "package-lint: %s (let through: %d agent- API names, %d other; see %s)"
             (if clean "clean" "FAILED") agent other
             "scripts/package-lint-batch.el")
    clean))

(kill-emacs (if (amacs-lint-files command-line-args-left) 0 1))

;;; package-lint-batch.el ends here
