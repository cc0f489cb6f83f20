# The C module under signal (warm_launch imports it: signal.py imports enum); the names it uses.
from signal import SIG_DFL as SIG_DFL
from signal import SIGHUP as SIGHUP
from signal import SIGINT as SIGINT
from signal import SIGQUIT as SIGQUIT
from signal import SIGTERM as SIGTERM
from signal import signal as signal
