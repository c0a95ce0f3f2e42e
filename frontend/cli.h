/*
 * cli: the torchserve-c command line, as TorchServe's: --start (background launcher that waits
 * for "Model server started."), --start --foreground (the server itself), --stop (SIGTERM and
 * wait until the server, and so its workers, have exited), and the pidfile
 * ${TMPDIR:-/tmp}/.torchserve-c.pid that refuses a second instance. Main thread only.
 */
#ifndef TS_CLI_H
#define TS_CLI_H

int cli_main(int argc, char **argv);
/* Creates the pidfile for this process; refuses (with a message) if a live server owns it. */
int cli_pidfile_acquire(void);
void cli_pidfile_release(void);

#endif
