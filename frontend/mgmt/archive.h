/*
 * archive: model archives. Extraction of .mar (zip), .tar.gz/.tgz and plain directories with
 * MAR-INF/MANIFEST.json, refusing `..` paths, absolute paths, links that point out of the tree,
 * devices/fifos, and entries or totals over the limits; every refusal names the entry.
 * Creation of the same formats for torchserve-c-archiver. Blocking disk work: the frontend calls
 * it off the loop thread (or at start-up).
 */
#ifndef TS_ARCHIVE_H
#define TS_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

struct archive_limits {
    uint64_t max_entry_bytes; /* default 2 GiB */
    uint64_t max_total_bytes; /* default 4 GiB */
    size_t max_entries;       /* default 10000 */
};

/* ARCHIVE_FMT_ZIP_STORE (zip without compression, torch-model-archiver's zip-store) is only
 * written: reading, it is a zip like any other. */
enum archive_format { ARCHIVE_FMT_ZIP, ARCHIVE_FMT_TGZ, ARCHIVE_FMT_DIR, ARCHIVE_FMT_ZIP_STORE };

void archive_default_limits(struct archive_limits *l);
/* Detects the format of src by name/content: directory, zip (.mar/.zip) or gzip tar. */
int archive_detect(const char *src, enum archive_format *fmt);
/* Extracts src (zip or tgz) into dest_dir (created, must not exist or be empty; its parent
 * must exist). lim NULL = archive_default_limits. 0, TS_E_EXISTS if dest_dir is not empty,
 * -errno for I/O errors, or TS_E_BAD_ARCHIVE with err like
 * "archive entry '../x': path escapes the archive directory". On failure dest_dir is removed
 * (or emptied, if it existed before). A directory src is refused: the caller uses it in place. */
int archive_extract(const char *src, const char *dest_dir, const struct archive_limits *lim,
                    char *err, size_t errlen);
/* The model root of an extracted tree: dir itself, unless dir has no MAR-INF and holds exactly
 * one entry, a directory, as torch-model-archiver --archive-format tgz writes (every entry under
 * NAME/); then dir/NAME. Always a malloc'd path. */
char *archive_model_root(const char *dir);
/* Packs every file under src_dir (recursively, relative paths, name order) into out_path as zip
 * (deflate; stored for ARCHIVE_FMT_ZIP_STORE) or tgz, written to a temporary name and renamed into
 * place. ARCHIVE_FMT_DIR copies the tree to the directory out_path instead. 0, -errno or
 * TS_E_BAD_ARCHIVE with err set. */
int archive_create(const char *src_dir, const char *out_path, enum archive_format fmt, char *err,
                   size_t errlen);

#endif
