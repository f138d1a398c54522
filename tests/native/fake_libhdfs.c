/* A stand-in for libhdfs.so, for tests only: CI has no Hadoop, so this implements the
 * libhdfs C functions tfyarn's TensorFlow plugin calls, over the local directory
 * $TFYARN_FAKE_HDFS_ROOT. It mimics what the plugin relies on in the real one: create
 * makes parent dirs, mkdir is `mkdir -p`, names in listings are full URIs, an empty
 * directory lists as NULL with errno 0, and every namenode connected to is appended to
 * $TFYARN_FAKE_HDFS_ROOT/.namenodes (so tests can check how URIs were split).
 * The real libhdfs is exercised by integration/ against a real HDFS. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct { int mKind; char *mName; time_t mLastMod; int64_t mSize; short mReplication;
                 int64_t mBlockSize; char *mOwner; char *mGroup; short mPermissions;
                 time_t mLastAccess; } hdfsFileInfo;
struct hdfsBuilder { char nn[1024]; };
typedef struct { char root[PATH_MAX]; } FakeFS;
typedef struct { int fd; } FakeFile;

static void real_path(FakeFS *fs, const char *path, char *out) {
  snprintf(out, PATH_MAX, "%s%s", fs->root, path);
}

static int mkdirs(const char *dir) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; ++p) {
    if (*p == '/') { *p = 0; if (mkdir(tmp, 0755) && errno != EEXIST) return -1; *p = '/'; }
  }
  return (mkdir(tmp, 0755) && errno != EEXIST) ? -1 : 0;
}

struct hdfsBuilder *hdfsNewBuilder(void) { return calloc(1, sizeof(struct hdfsBuilder)); }
void hdfsBuilderSetNameNode(struct hdfsBuilder *b, const char *nn) {
  snprintf(b->nn, sizeof b->nn, "%s", nn);
}
void *hdfsBuilderConnect(struct hdfsBuilder *b) {
  const char *root = getenv("TFYARN_FAKE_HDFS_ROOT");
  if (!root) { errno = EINVAL; free(b); return NULL; }
  FakeFS *fs = calloc(1, sizeof *fs);
  snprintf(fs->root, sizeof fs->root, "%s", root);
  char log[PATH_MAX];
  snprintf(log, sizeof log, "%s/.namenodes", root);
  FILE *f = fopen(log, "a");
  if (f) { fprintf(f, "%s\n", b->nn); fclose(f); }
  free(b);
  return fs;
}
void *hdfsOpenFile(FakeFS *fs, const char *path, int flags, int buf, short rep, int32_t bs) {
  char p[PATH_MAX];
  real_path(fs, path, p);
  int mode = O_RDONLY;
  if (flags & O_WRONLY) {
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", p);
    char *slash = strrchr(parent, '/');
    if (slash) { *slash = 0; mkdirs(parent); }
    mode = (flags & O_APPEND) ? (O_WRONLY | O_APPEND) : (O_WRONLY | O_CREAT | O_TRUNC);
  }
  int fd = open(p, mode, 0644);
  if (fd < 0) return NULL;
  FakeFile *file = malloc(sizeof *file);
  file->fd = fd;
  return file;
}
int hdfsCloseFile(FakeFS *fs, FakeFile *file) { int rc = close(file->fd); free(file); return rc; }
int32_t hdfsPread(FakeFS *fs, FakeFile *f, int64_t off, void *buf, int32_t n) {
  return (int32_t)pread(f->fd, buf, (size_t)n, off);
}
int32_t hdfsWrite(FakeFS *fs, FakeFile *f, const void *buf, int32_t n) {
  return (int32_t)write(f->fd, buf, (size_t)n);
}
int hdfsHFlush(FakeFS *fs, FakeFile *f) { return 0; }
int hdfsHSync(FakeFS *fs, FakeFile *f) { return fsync(f->fd); }
int hdfsExists(FakeFS *fs, const char *path) {
  char p[PATH_MAX];
  real_path(fs, path, p);
  return access(p, F_OK) == 0 ? 0 : -1;
}
static void fill(hdfsFileInfo *info, const char *uri, struct stat *st) {
  memset(info, 0, sizeof *info);
  info->mKind = S_ISDIR(st->st_mode) ? 'D' : 'F';
  info->mName = strdup(uri);
  info->mLastMod = st->st_mtime;
  info->mSize = S_ISDIR(st->st_mode) ? 0 : st->st_size;
}
hdfsFileInfo *hdfsGetPathInfo(FakeFS *fs, const char *path) {
  char p[PATH_MAX], uri[PATH_MAX + 32];
  struct stat st;
  real_path(fs, path, p);
  if (stat(p, &st)) return NULL;
  hdfsFileInfo *info = malloc(sizeof *info);
  snprintf(uri, sizeof uri, "hdfs://fake%s", path);
  fill(info, uri, &st);
  return info;
}
hdfsFileInfo *hdfsListDirectory(FakeFS *fs, const char *path, int *n) {
  char p[PATH_MAX];
  real_path(fs, path, p);
  *n = 0;
  DIR *d = opendir(p);
  if (!d) return NULL;
  hdfsFileInfo *out = NULL;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, ".namenodes"))
      continue;
    char child[PATH_MAX * 2], uri[PATH_MAX * 2];
    struct stat st;
    snprintf(child, sizeof child, "%s/%s", p, e->d_name);
    if (stat(child, &st)) continue;
    out = realloc(out, sizeof *out * (*n + 1));
    snprintf(uri, sizeof uri, "hdfs://fake%s%s%s", path,
             path[strlen(path) - 1] == '/' ? "" : "/", e->d_name);
    fill(&out[(*n)++], uri, &st);
  }
  closedir(d);
  errno = 0;
  return out;
}
void hdfsFreeFileInfo(hdfsFileInfo *infos, int n) {
  for (int i = 0; i < n; ++i) free(infos[i].mName);
  free(infos);
}
int hdfsCreateDirectory(FakeFS *fs, const char *path) {
  char p[PATH_MAX];
  real_path(fs, path, p);
  return mkdirs(p);
}
static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(p);
}
int hdfsDelete(FakeFS *fs, const char *path, int recursive) {
  char p[PATH_MAX];
  struct stat st;
  real_path(fs, path, p);
  if (stat(p, &st)) return -1;
  if (!S_ISDIR(st.st_mode)) return unlink(p);
  return recursive ? nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS) : rmdir(p);
}
int hdfsRename(FakeFS *fs, const char *from, const char *to) {
  char a[PATH_MAX], b[PATH_MAX];
  real_path(fs, from, a);
  real_path(fs, to, b);
  return rename(a, b);
}
