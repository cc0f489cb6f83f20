;;; amacs-batch.el --- One headless AMACS session, driven as a person would -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; `amacs-batch-run' runs one session of an experiment (ARCHITECTURE.md, Research;
;; `amacs-server experiment') in a batch Emacs: it opens `*amacs-shell*'
;; (which starts the server), types each turn of the run into the shell,
;; waits for the turn to end, then stops the server and exits Emacs.
;;
;; The experiment starts a batch Emacs (-Q --batch) with this folder and
;; the packages epc and magit-section on its load path, loads this file
;; and evaluates (amacs-batch-run "RUN.json").
;;
;; RUN.json is an object with the keys:
;;
;;   turns           the person's inputs, in order (strings)
;;   max_steps       steps per turn (`amacs-max-steps'), optional
;;   server_command  the server's command line (`amacs-server-command'), optional
;;   wait            seconds any one wait may take (default 600)
;;   result          a file to write the outcome to, as JSON:
;;                   {"turns_done": N, "error": null or a string}
;;   shell           a file to write the shell's text to at the end, optional
;;   go              non-nil: once the server is ready, wait for the line
;;                   "go" on standard input before the first turn (the run
;;                   was prepared ahead), optional; if standard input ends
;;                   first (the experiment is gone), exit 4 and write nothing
;;   trace           a file to append the run's marks to, one "NAME SECONDS"
;;                   line each (`float-time'), optional: where its time goes
;;   parent          the process id of the experiment that started this
;;                   Emacs, optional (default: its parent as it starts the
;;                   run, which may already be init if the experiment died
;;                   while this Emacs loaded)
;;
;; The AMACS home, the model endpoint, its key and the budget limit come
;; from the environment (AMACS_HOME, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY,
;; AMACS_BUDGET_LIMIT, ...), which the server inherits.  Emacs exits 0
;; when every turn ended, 3 when a wait timed out or the server did not
;; start.

;;; Code:

(require 'json)
(require 'amacs)
(require 'amacs-shell)
(require 'comint)

(defvar amacs-batch-gc-threshold (* 8 1024 1024)
  "The `gc-cons-threshold' of a session, once its elisp is loaded.")

(defvar amacs-batch--wait 600
  "Seconds any one wait of the current run may take.")

(defvar amacs-batch--turns-done 0
  "Turns of the current run that have ended.")

(defun amacs-batch--read (file)
  "Return the run in the JSON FILE as a hash table."
  (with-temp-buffer
    (insert-file-contents file)
    (json-parse-buffer :object-type 'hash-table :array-type 'list
                       :null-object nil :false-object nil)))

(defvar amacs-batch--trace nil
  "The file the current run's marks are appended to, or nil.")

(defun amacs-batch--mark (name &optional time)
  "Append the mark NAME at TIME (default now) to the run's trace file, if any."
  (when amacs-batch--trace
    (write-region (format "%s %.6f\n" name (or time (float-time))) nil amacs-batch--trace 'append 'silent)))

(defvar amacs-batch--parent nil
  "The process id of the experiment that started this Emacs.")

(defun amacs-batch--orphaned-p ()
  "Non-nil once the experiment that started this Emacs is gone.
Its parent then changes; nobody will start, read or stop this run."
  (and amacs-batch--parent
       (not (eql amacs-batch--parent
                 (alist-get 'ppid (process-attributes (emacs-pid)))))))

(defun amacs-batch--wait-for (predicate)
  "Wait until PREDICATE is non-nil; return nil if `amacs-batch--wait' passed.
A run whose experiment is gone waits no more: it ends as never started."
  (let ((deadline (+ (float-time) amacs-batch--wait)))
    (while (and (not (funcall predicate)) (< (float-time) deadline))
      (when (amacs-batch--orphaned-p)
        (throw 'amacs-batch-never-started nil))
      (accept-process-output nil 0.02))
    (funcall predicate)))

(defun amacs-batch--send (text)
  "Type TEXT into the shell and press RET; return non-nil once the turn ended."
  (with-current-buffer amacs-shell-buffer-name
    (goto-char (point-max))
    (insert text)
    (comint-send-input))
  (amacs-batch--mark "sent")
  (prog1 (amacs-batch--wait-for (lambda () (not amacs-shell-busy)))
    (amacs-batch--mark "turn-done")
    ;; The server's turn-done is the turn's last event: what came with it is
    ;; shown, and nothing more is waited for.
    (while (accept-process-output nil 0))
    (amacs-batch--mark "settled")))

(defun amacs-batch--write (run failure)
  "Write the outcome of RUN (FAILURE, or nil) and the shell's text to its files."
  (let ((result (gethash "result" run))
        (shell (gethash "shell" run))
        (buf (get-buffer amacs-shell-buffer-name)))
    (when (and shell buf)
      (with-current-buffer buf
        (write-region (point-min) (point-max) shell nil 'silent)))
    (when result
      (with-temp-file result
        (insert (json-encode (list (cons 'turns_done amacs-batch--turns-done)
                                   (cons 'error failure))))))))

(defun amacs-batch--started-p ()
  "Wait for the line \"go\" on standard input: the run is started.
Nil if it never will be: standard input ended (the experiment that
prepared it is gone, and with it the pipe's other end), or its server
stopped meanwhile.  Nothing is polled while the run waits."
  (and (equal (condition-case nil (read-from-minibuffer "") (error nil)) "go")
       (amacs-live-p)))

(defun amacs-batch--stop ()
  "Stop the server and wait for it to exit; nil if it exited 0, else why not.
It exits 0 once its last tick is committed; any other end (killed, or
stopped by force after `amacs-stop-grace') may have lost that commit."
  (let ((server (amacs-life-process (amacs-connection-life (amacs-current-connection)))))
    (amacs-stop-server)
    (when (processp server)
      (unless (and (eq (process-status server) 'exit) (eql (process-exit-status server) 0))
        (format "the server %s %s while stopping: its last tick may not be committed"
                (if (eq (process-status server) 'signal) "was killed by signal" "exited")
                (process-exit-status server))))))

(defun amacs-batch--exit (code)
  "Exit Emacs with CODE at once.
The shell saved its history at each input and the server has exited:
nothing on `kill-emacs-hook' is left to do for a run."
  (setq kill-emacs-hook nil)
  (kill-emacs code))

(defun amacs-batch--session (run)
  "Drive the session RUN; return nil when every turn ended, else why not."
  (let ((turns (gethash "turns" run))
        (go (gethash "go" run)))
    (amacs-shell)
    (amacs-batch--mark "shell-opened")
    (cond
     ((not (amacs-batch--wait-for #'amacs-live-p))
      (format "the server did not start within %s s" amacs-batch--wait))
     ((progn
        (amacs-batch--mark "hello")
        (accept-process-output nil 0.05)  ; what came with hello is shown (while prepared, ahead)
        (and go (not (amacs-batch--started-p))))
      (throw 'amacs-batch-never-started nil))
     (t
      (amacs-batch--mark "go")
      (catch 'stop
        (dolist (turn turns)
          (unless (amacs-batch--send turn)
            (throw 'stop (format "turn %d did not end within %s s"
                                 (1+ amacs-batch--turns-done) amacs-batch--wait)))
          (setq amacs-batch--turns-done (1+ amacs-batch--turns-done)))
        nil)))))

;;;###autoload
(defun amacs-batch-run (file)
  "Run the headless session described by the JSON run FILE, then exit Emacs.
See the commentary of amacs-batch.el for the keys of FILE.  Exits 0
when every turn ended, 4 when a prepared run was never started, else 3."
  (let* ((loaded (float-time))
         (run (amacs-batch--read file))
         (command (gethash "server_command" run))
         (steps (gethash "max_steps" run))
         failure)
    (setq amacs-batch--wait (or (gethash "wait" run) 600)
          amacs-batch--trace (gethash "trace" run)
          amacs-batch--turns-done 0
          amacs-batch--parent (or (gethash "parent" run)
                                  (alist-get 'ppid (process-attributes (emacs-pid)))))
    (amacs-batch--mark "emacs-init" (float-time before-init-time))
    (amacs-batch--mark "loaded" loaded)
    ;; The experiment loads this file with garbage collection held off (64 MB);
    ;; a session collects more often than that, so long runs stay small.
    (setq gc-cons-threshold amacs-batch-gc-threshold)
    (when command (setq amacs-server-command command))
    (when steps (setq amacs-max-steps steps))
    ;; Nobody sees the shell's faces: its text is the same without org's
    ;; fontification, whose first use loads org (~1 s of each run's CPU).
    (setq amacs-render-org nil)
    (catch 'amacs-batch-never-started
      (setq failure (condition-case err
                        (amacs-batch--session run)
                      (error (error-message-string err))))
      (amacs-batch--write run failure)
      (amacs-batch--mark "written")
      (let ((stopped (amacs-batch--stop)))
        (amacs-batch--mark "server-exited")
        (when (and stopped (not failure))
          (setq failure stopped)
          (amacs-batch--write run failure)))
      (amacs-batch--exit (if failure 3 0)))
    ;; Prepared and never started, or its experiment gone: the folder is the
    ;; experiment's again (a resumed experiment makes it afresh), so nothing is
    ;; written there.
    (amacs-stop-server)
    (amacs-batch--exit 4)))

(provide 'amacs-batch)
;;; amacs-batch.el ends here
