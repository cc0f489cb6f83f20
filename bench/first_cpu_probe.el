;;; first_cpu_probe.el --- Stamps of Emacs's CPU on its way to the first answer -*- lexical-binding: t -*-

;;; Commentary:

;; Loaded first (`-l') by bench/bench_first_cpu.py's emacs wrapper: each stamp appends
;; a line "POINT CPU-MS WALL GCS" to $AMACS_EMACS_PROBE, CPU being
;; `get-internal-run-time' (getrusage: Emacs's own CPU, microseconds).

;;; Code:

(defvar first-cpu-probe--file (getenv "AMACS_EMACS_PROBE"))

(defun first-cpu-probe (point)
  "Append POINT with Emacs's CPU so far."
  (when first-cpu-probe--file
    (let ((line (format "%s\t%.2f\t%.6f\t%d\n" point (* 1000 (float-time (get-internal-run-time)))
                        (float-time) gcs-done))
          (coding-system-for-write 'utf-8-unix)
          (inhibit-message t))
      (write-region line nil first-cpu-probe--file t 'silent))))

(first-cpu-probe "start")
(add-hook 'after-load-functions
          (lambda (file) (first-cpu-probe (concat "loaded " (file-name-nondirectory file)))))
(defun first-cpu-probe--before (name)
  "A :before advice stamping NAME."
  (lambda (&rest _) (first-cpu-probe name)))
(defun first-cpu-probe--after (name)
  "An :after advice stamping NAME."
  (lambda (&rest _) (first-cpu-probe name)))
(advice-add 'amacs-start-server :before (first-cpu-probe--before "start-server"))
(advice-add 'amacs--ask-warm-server :after (first-cpu-probe--after "asked warm"))
(advice-add 'amacs-ask-warm-first :after (first-cpu-probe--after "asked warm first"))
(advice-add 'amacs-shell :after (first-cpu-probe--after "shell done"))
(advice-add 'amacs-shell-return :before (first-cpu-probe--before "RET"))
(advice-add 'amacs-shell-return :after (first-cpu-probe--after "RET done"))
(with-eval-after-load 'amacs-server
  (add-hook 'amacs-ready-hook (lambda () (first-cpu-probe "ready")) -100)
  (add-hook 'amacs-ready-hook (lambda () (first-cpu-probe "ready done")) 100))
(advice-add 'amacs--drain-events :around
            (lambda (drain connection)
              (let ((types (mapcar (lambda (e) (plist-get e :type))
                                   (amacs-wire-queue (amacs-connection-wire connection)))))
                (first-cpu-probe (format "drain %s" (string-join types ",")))
                (funcall drain connection)
                (first-cpu-probe "drained"))))
(let ((drawn 0))
  (add-hook 'pre-redisplay-functions
            (lambda (_w) (when (< drawn 400) (setq drawn (1+ drawn)) (first-cpu-probe "redisplay")))))

(provide 'first_cpu_probe)
;;; first_cpu_probe.el ends here
