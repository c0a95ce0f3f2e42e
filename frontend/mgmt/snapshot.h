/*
 * snapshot: TorchServe's config snapshots, so that models registered through the API survive a
 * restart and TorchServe's tooling finds what it expects.
 *
 * After every management change (register, scale, set-default, unregister) the server writes
 * $LOG_LOCATION/config/<yyyyMMddHHmmssSSS>-snapshot.cfg (default logs/): the properties of the
 * config file it started from, and model_snapshot={"name", "modelCount", "created", "models":
 * {NAME: {VERSION:
 * {"defaultVersion", "marName", "minWorkers", "maxWorkers", "batchSize", "maxBatchDelay",
 * "responseTimeout", "startupTimeout"}}}}. Writes are atomic (a temporary file, fsync, rename,
 * fsync of the directory): a crash at any point leaves the previous snapshot whole. The newest
 * SNAPSHOT_KEEP are kept.
 *
 * `--start` without --ts-config, TS_CONFIG_FILE or --ncs starts from the newest snapshot in
 * that directory (snapshot_newest). model_snapshot and TorchServe's `models=`
 * (the same "models" object) are checked whole when the config is loaded (snapshot_check), so a
 * corrupt one refuses the start with file:line and is never partly applied, and are applied
 * after the listeners are up (snapshot_apply). Loop thread only.
 */
#ifndef TS_SNAPSHOT_H
#define TS_SNAPSHOT_H

#include <stddef.h>

#define SNAPSHOT_KEEP 20

/* json: a model_snapshot value ({"models": {...}, ...}) or a models= value ({...}); models_only
 * says which. 0, or -1 with why (what is wrong, and where in the JSON). */
int snapshot_check(const char *json, int models_only, char *why, size_t whylen);
/* Registers every model version of a checked value, with its workers, batch settings and
 * default version. Failures are logged per model and do not stop the others. */
void snapshot_apply(const char *json, int models_only);
/* Where snapshots live: $LOG_LOCATION/config, else logs/config (as TorchServe), in the working
 * directory; the same for writing and for finding the newest at start. */
const char *snapshot_dir(void);
/* Reads the config the server started from once (snapshots copy its settings even after the
 * file itself, an old snapshot, has been pruned). */
void snapshot_init(const char *config_path);
void snapshot_shutdown(void);
/* Writes a snapshot of the models registered now (no-op when disabled by --ncs). */
void snapshot_save(void);
/* Disables snapshot_save (--ncs). */
void snapshot_disable(void);
/* The newest logs/config/ *-snapshot.cfg under dir, malloc'd, or NULL. */
char *snapshot_newest(const char *dir);

#endif
