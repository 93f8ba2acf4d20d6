"""The processes of a run started in a session of its own (start_new_session=True): mpirun and every
rank it started (a rank may sit in a process group of its own, so killpg alone would leave it)."""
import os


def session_members(sid):
    """Process ids whose session is `sid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    out.append(int(entry))
            except (ProcessLookupError, PermissionError):
                pass
    return out
