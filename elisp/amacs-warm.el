;;; amacs-warm.el --- Ask the warm server for a home's server, before the client loads -*- lexical-binding: t -*-

;; Copyright (C) 2026 AMACS developers

;; Author: AMACS developers
;; Keywords: tools, ai

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Emacs asks the warm server (amacs_server/warm.py) for its home's
;; server on the warm server's Emacs socket: the request is the
;; server's environment, folder and arguments, in JSON.  This file
;; holds what that request needs (the socket's name, a fresh token,
;; the server's environment) and needs nothing else, so that ./amacs
;; asks first thing (`amacs-ask-warm-first'), before the client's
;; libraries load: under load on two cores the ~15-26 ms of Lisp
;; before the ask were 50-130 ms of wall time by which the server's
;; hello trailed the prompt, and a question typed at once waited for
;; it.  The server process asked for so waits, unread, until
;; `amacs-start-server' takes it (amacs-server.el) as the server it
;; would have asked for itself, or stops it.

;;; Code:

(defconst amacs--root
  (file-name-directory
   (directory-file-name
    (file-name-directory (or load-file-name buffer-file-name default-directory))))
  "The AMACS source tree: the folder above elisp/.")

(defun amacs--make-token ()
  "Return a fresh 256-bit secret as hex, read from /dev/urandom."
  (with-temp-buffer
    (unless (and (file-readable-p "/dev/urandom")
                 (eq 0 (call-process "od" nil t nil "-An" "-v" "-tx1" "-N32" "/dev/urandom")))
      (error "Cannot read /dev/urandom to make the server's token"))
    (let ((hex (replace-regexp-in-string "[^0-9a-f]" "" (buffer-string))))
      (unless (= (length hex) 64) (error "Short read from /dev/urandom"))
      hex)))

(defun amacs--environment-with (token home key &optional chosen)
  "Return `process-environment' for a server of HOME that must present TOKEN.
KEY is the API key to give it, or nil (the environment's, if any);
CHOSEN are entries (\"NAME=VALUE\") that win over the environment."
  (let ((env (append chosen (cons (concat "AMACS_TOKEN=" token) process-environment))))
    (when key (push (concat "ANTHROPIC_API_KEY=" key) env))
    (cons (concat "AMACS_HOME=" home) env)))

(defun amacs--warm-directory ()
  "The folder of this user's warm servers.
As amacs_server/warm_launch.py names it."
  (let ((chosen (getenv "AMACS_WARM_DIR")))
    (if (and chosen (not (equal chosen "")))
        chosen
      (expand-file-name (format "amacs-warm-%d" (user-uid))
                        (let ((runtime (getenv "XDG_RUNTIME_DIR")))
                          (if (and runtime (not (equal runtime ""))) runtime "/tmp"))))))

(defun amacs--private-directory-p (dir)
  "Non-nil when DIR is a folder (not a link) of this user's.
And no one else may open it."
  (let ((attributes (file-attributes dir 'integer)))
    (and (eq (file-attribute-type attributes) t)
         (eql (file-attribute-user-id attributes) (user-uid))
         (string-match-p "\\`d...------\\'" (file-attribute-modes attributes)))))

(defun amacs--warm-socket (python)
  "The socket where the warm server of PYTHON forks servers for Emacs.
The warm server of PYTHON and this checkout.  Nil when its folder
is not private.  Named by PYTHON and the package's folder alone
\(amacs_server/warm.py, `emacs_socket'): the warm server answers only
while its sources are unchanged."
  (let ((directory (amacs--warm-directory))
        (mark (concat python "|" (directory-file-name (expand-file-name "amacs_server" amacs--root)))))
    (and (amacs--private-directory-p directory)
         (expand-file-name (format "emacs-%s.sock"
                                   (substring (secure-hash 'sha1 (encode-coding-string mark 'utf-8)) 0 16))
                           directory))))

(defun amacs--warm-request ()
  "Return the request for a server, started as `make-process' would start it.
Its environment (`process-environment', the first entry of a name
winning, as for a process), folder (`default-directory') and no
arguments, in JSON after its length (4 bytes, big-endian)."
  (let ((env (make-hash-table :test #'equal))
        (cwd (directory-file-name (expand-file-name default-directory))))
    (dolist (entry process-environment)
      (let* ((at (string-search "=" entry))
             (name (if at (substring entry 0 at) entry)))
        (unless (gethash name env)
          (puthash name (if at (substring entry (1+ at)) :unset) env))))
    (maphash (lambda (name value) (when (eq value :unset) (remhash name env))) env)
    (puthash "PWD" cwd env)             ; as Emacs sets it for the processes it starts
    (let ((json (encode-coding-string
                 (json-serialize (list :argv [] :env env :cwd cwd)) 'utf-8)))
      (concat (unibyte-string (logand (ash (length json) -24) 255) (logand (ash (length json) -16) 255)
                              (logand (ash (length json) -8) 255) (logand (length json) 255))
              json))))

(defun amacs--open-warm (socket request &optional stopped)
  "Send REQUEST to the warm server on SOCKET; return the connection, or nil.
STOPPED: nothing it answers is read until `continue-process'.  Nil when
no warm server listens there, or it went before it was sent REQUEST."
  (let* ((buffer (generate-new-buffer " *amacs-server*"))
         (proc (ignore-errors
                 (make-network-process :name "amacs-server" :family 'local :service socket
                                       :buffer buffer :coding 'binary :noquery t :stop stopped))))
    (when proc
      (unless (ignore-errors (process-send-string proc request) t)
        (process-put proc 'amacs-reported t) ; gone already: the launcher starts it
        (set-process-sentinel proc #'ignore)
        (delete-process proc)
        (setq proc nil)))
    (unless proc (kill-buffer buffer))
    proc))

(defvar amacs--asked-first nil
  "The server asked for before the client loaded, not yet taken, or nil.
A plist: :process, the connection to the warm server (stopped: nothing
read); :token, the server's; :socket and :request, where and what was
asked.  `amacs-start-server' takes it (amacs-server.el).")

(defun amacs-ask-warm-first ()
  "Ask the warm server now for the server `amacs-shell' would ask it for.
Return non-nil when asked.  The server of the home `amacs-home' or
$AMACS_HOME names, with the environment, folder and token that
`amacs-start-server' would give it: it takes that server when it would
have asked for the same one, and stops it otherwise.  Asked only when
an interactive Emacs's first start would ask the warm server (the
checkout's venv, `amacs-warm-server'), with the key in the environment
\(one from auth-source needs its library), no early start by ./amacs
\(AMACS_EARLY) and no server.json in the home (a headless server, or
one that did not end cleanly)."
  (let ((python (expand-file-name ".venv/bin/python" amacs--root))
        (home (directory-file-name (expand-file-name (or (bound-and-true-p amacs-home) (getenv "AMACS_HOME")
                                                         "~/.agent")))))
    (when (and (not noninteractive) (not amacs--asked-first)
               (not (equal (getenv "AMACS_WARM") "0"))
               (or (not (boundp 'amacs-warm-server)) (symbol-value 'amacs-warm-server))
               (getenv "ANTHROPIC_API_KEY") (not (bound-and-true-p amacs-api-key))
               (not (getenv "AMACS_EARLY"))
               (not (file-exists-p (expand-file-name "server.json" home)))
               (file-executable-p python)
               (file-directory-p default-directory) (not (file-remote-p default-directory)))
      (let ((socket (amacs--warm-socket python)))
        (when (and socket (file-exists-p socket))
          (let* ((token (amacs--make-token))
                 (request (let ((process-environment (amacs--environment-with token home nil)))
                            (amacs--warm-request)))
                 (proc (amacs--open-warm socket request t)))
            (when proc
              (setq amacs--asked-first (list :process proc :token token :socket socket :request request)))))))))

(provide 'amacs-warm)
;;; amacs-warm.el ends here
