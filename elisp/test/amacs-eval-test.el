;;; amacs-eval-test.el --- ERT tests for the files an eval reads and writes -*- lexical-binding: t -*-

;;; Commentary:

;; Issue 11; agent-world-architecture.md, The World: tracking of
;; known_content_files.  An eval's result names the files the agent's
;; form read and wrote, and the noting is gone after the eval, however
;; it ended.

;;; Code:

(require 'ert)
(require 'amacs-eval)

(defvar amacs-eval-test--inner nil "The result of an eval run inside another, for a test.")
(defvar amacs-eval-test--file nil "A file an inner eval reads, for a test.")
(defvar amacs-eval-test--loaded nil "Set by the library a test loads.")

(defun amacs-eval-test--noting-p ()
  "Non-nil when any part of the eval's file noting is still installed."
  (or (advice-member-p #'amacs--eval-note-visit #'find-file-noselect)
      (rassq #'amacs--eval-file-handler file-name-handler-alist)))

(defmacro amacs-eval-test--with-files (names &rest body)
  "Bind NAMES to new files in a temporary directory, run BODY, clean up.
Each file holds its own name; `dir' is bound to the directory."
  (declare (indent 1))
  `(let* ((dir (file-name-as-directory (make-temp-file "amacs-eval-test" t)))
          ,@(mapcar (lambda (name) `(,name (expand-file-name ,(symbol-name name) dir))) names))
     (unwind-protect
         (progn
           ,@(mapcar (lambda (name) `(with-temp-file ,name (insert ,(symbol-name name)))) names)
           ,@body)
       (dolist (buffer (buffer-list))
         (when (and (buffer-file-name buffer) (string-prefix-p dir (buffer-file-name buffer)))
           (with-current-buffer buffer (set-buffer-modified-p nil))
           (kill-buffer buffer)))
       (delete-directory dir t))))

(ert-deftest amacs-eval-test-files-read-and-written-are-in-the-result ()
  "Issue 11: insert-file-contents and find-file-noselect are reads; write-region,
with-temp-file and save-buffer are writes; absolute names, each once, in order."
  (amacs-eval-test--with-files (a b c d)
    (let ((result (amacs--eval-form
                   (format "(with-temp-buffer (insert-file-contents %S) (insert-file-contents %S))
                            (with-current-buffer (find-file-noselect %S) (insert \"more\") (save-buffer))
                            (with-temp-file %S (insert \"new\"))
                            (write-region \"x\" nil %S)
                            (buffer-size (find-file-noselect %S))"
                           a a b c d b))))
      (should (plist-get result :success))
      (should (equal (plist-get result :files-read) (list a b)))
      (should (equal (plist-get result :files-written) (list b c d)))
      (should-not (amacs-eval-test--noting-p)))))

(ert-deftest amacs-eval-test-relative-names-and-open-buffers ()
  "Issue 11: a relative name is noted absolute; a buffer that visits its file
already is a read (find-file-noselect reads nothing from disk then)."
  (amacs-eval-test--with-files (a b)
    (find-file-noselect b)
    (let* ((default-directory dir)
           (result (amacs--eval-form
                    (format "(with-temp-buffer (insert-file-contents \"a\")) (find-file-noselect %S)" b))))
      (should (equal (plist-get result :files-read) (list a b)))
      (should-not (plist-member result :files-written)))))

(ert-deftest amacs-eval-test-no-files-no-keys ()
  "Issue 11: an eval that touches no file has the result it always had."
  (should (equal (amacs--eval-form "(+ 2 2)") '(:success t :result "4")))
  (should-not (plist-member (amacs--eval-form "(car 1)") :files-read)))

(ert-deftest amacs-eval-test-a-new-file-visited-is-not-read ()
  "Issue 11: visiting a file that is not on disk yet reads nothing; saving it writes it."
  (amacs-eval-test--with-files (a)
    (let* ((new (expand-file-name "new.txt" dir))
           (result (amacs--eval-form
                    (format "(with-current-buffer (find-file-noselect %S) (insert \"hi\") (save-buffer))" new))))
      (should-not (plist-member result :files-read))
      (should (equal (plist-get result :files-written) (list new))))))

(ert-deftest amacs-eval-test-loading-a-library-is-not-reading ()
  "Issue 11: a library the eval loads is not a file the agent read."
  (amacs-eval-test--with-files (lib)
    (with-temp-file lib (insert "(setq amacs-eval-test--loaded t)\n"))
    (let ((result (amacs--eval-form (format "(load %S nil t t)" lib))))
      (should (plist-get result :success))
      (should amacs-eval-test--loaded)
      (should-not (plist-member result :files-read)))))

(ert-deftest amacs-eval-test-files-kept-on-error-and-noting-gone-however-it-ends ()
  "Issue 11: an eval that fails still reports what it read; after an error, a quit
or an unreadable form, no advice and no file name handler remain."
  (amacs-eval-test--with-files (a)
    (let ((handlers file-name-handler-alist)
          (result (amacs--eval-form (format "(with-temp-buffer (insert-file-contents %S)) (car 1)" a))))
      (should-not (plist-get result :success))
      (should (equal (plist-get result :files-read) (list a)))
      (should-not (amacs-eval-test--noting-p))
      (should (equal (plist-get (amacs--eval-form "(signal 'quit nil)") :error) "quit: the eval was stopped (C-g)"))
      (should-not (amacs-eval-test--noting-p))
      (amacs--eval-form "(+ 1")
      (should-not (amacs-eval-test--noting-p))
      (should (equal file-name-handler-alist handlers))
      ;; Outside an eval nothing is noted, and reading files works as before.
      (should (equal (with-temp-buffer (insert-file-contents a) (buffer-string)) "a")))))

(ert-deftest amacs-eval-test-a-handler-the-eval-adds-stays ()
  "Issue 11: a file name handler the agent's form adds (loading Tramp, say) outlives the eval."
  (let ((regexp "\\`/amacs-eval-test:"))
    (unwind-protect
        (progn
          (amacs--eval-form (format "(push (cons %S #'ignore) file-name-handler-alist)" regexp))
          (should (assoc regexp file-name-handler-alist))
          (should-not (amacs-eval-test--noting-p)))
      (setq file-name-handler-alist (assoc-delete-all regexp file-name-handler-alist)))))

(ert-deftest amacs-eval-test-an-eval-inside-an-eval-notes-for-itself ()
  "Issue 11: an eval that runs inside another (from a process filter) notes its
own files, and the outer eval's noting goes on after it."
  (amacs-eval-test--with-files (a b)
    (let* ((amacs-eval-test--file a)
           (outer (amacs--eval-form
                   (format "(setq amacs-eval-test--inner (amacs--eval-form \"(with-temp-buffer (insert-file-contents amacs-eval-test--file))\"))
                            (with-temp-buffer (insert-file-contents %S))"
                           b)))
           (inner amacs-eval-test--inner))
      (should (equal (plist-get inner :files-read) (list a)))
      (should (equal (plist-get outer :files-read) (list b)))
      (should-not (amacs-eval-test--noting-p)))))

(ert-deftest amacs-eval-test-two-homes-agents-of-one-id-know-each-their-own-files ()
  "The files each agent had read were one table for the whole Emacs, by agent id: home B's
primary could write a file only home A's primary had read.  Each connection's server has its own."
  (amacs-eval-test--with-files (a)
    (let* ((amacs--connections nil)
           (home-a (amacs-connection-for (expand-file-name "a" dir)))
           (home-b (amacs-connection-for (expand-file-name "b" dir)))
           (amacs-read-before-write t)
           (amacs-current-agent "primary"))
      (amacs-with-connection home-a
        (should (plist-get (amacs--eval-form (format "(with-temp-buffer (insert-file-contents %S))" a))
                           :success)))
      (amacs-with-connection home-b
        (should (string-match-p "never read by primary"
                                (plist-get (amacs--eval-form (format "(write-region \"b\" nil %S)" a))
                                           :error))))
      (amacs-with-connection home-a
        (should (plist-get (amacs--eval-form (format "(write-region \"a\" nil %S)" a)) :success))))))

(provide 'amacs-eval-test)
;;; amacs-eval-test.el ends here
