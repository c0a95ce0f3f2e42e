/*
 * cli: the torchserve-c command line, as TorchServe's: --start (background launcher that waits
 * for "Model server started."), --start --foreground (the server itself), --stop (SIGTERM and
 * wait until the server, and so its workers, have exited; with --ts-config FILE, the instance of
 * that config). Pidfiles are per instance (instance.h). Main thread only.
 */
#ifndef TS_CLI_H
#define TS_CLI_H

int cli_main(int argc, char **argv);

#endif
