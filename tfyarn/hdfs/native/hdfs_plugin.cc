// tfyarn's HDFS filesystem plugin for TensorFlow (hdfs:// and viewfs://).
//
// Written against TF's stable modular-filesystem C API
// (tensorflow/c/experimental/filesystem/filesystem_interface.h), so one build loads in
// TF 2.17 through 2.21 (link with -l:libtensorflow_framework.so.2). It calls libhdfs (JNI)
// through dlopen at first use, so the plugin loads where Hadoop is absent and says which
// variable or file is missing when an hdfs:// path is first touched.
//
// libhdfs is found at $TFYARN_LIBHDFS, else $HADOOP_HDFS_HOME/lib/native/libhdfs.so, else
// $HADOOP_HOME/lib/native/libhdfs.so, else libhdfs.so on LD_LIBRARY_PATH. The real one
// also needs libjvm.so on LD_LIBRARY_PATH and Hadoop's jars on CLASSPATH.

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tensorflow/c/experimental/filesystem/filesystem_interface.h"
#include "tensorflow/c/tf_status.h"

namespace {

// ---------------------------------------------------------------- the libhdfs ABI we use
// Declared here (not included) so the plugin builds where no Hadoop is installed.

struct hdfs_internal;
typedef hdfs_internal* hdfsFS;
struct hdfsFile_internal;
typedef hdfsFile_internal* hdfsFile;
struct hdfsBuilder;

struct hdfsFileInfo {
  int mKind;  // 'F' file, 'D' directory
  char* mName;
  time_t mLastMod;
  int64_t mSize;
  short mReplication;
  int64_t mBlockSize;
  char* mOwner;
  char* mGroup;
  short mPermissions;
  time_t mLastAccess;
};

struct LibHdfs {
  std::string error;  // why it could not be loaded; empty when loaded
  hdfsBuilder* (*NewBuilder)();
  void (*BuilderSetNameNode)(hdfsBuilder*, const char*);
  hdfsFS (*BuilderConnect)(hdfsBuilder*);
  hdfsFile (*OpenFile)(hdfsFS, const char*, int, int, short, int32_t);
  int (*CloseFile)(hdfsFS, hdfsFile);
  int32_t (*Pread)(hdfsFS, hdfsFile, int64_t, void*, int32_t);
  int32_t (*Write)(hdfsFS, hdfsFile, const void*, int32_t);
  int (*HFlush)(hdfsFS, hdfsFile);
  int (*HSync)(hdfsFS, hdfsFile);
  int (*Exists)(hdfsFS, const char*);
  hdfsFileInfo* (*GetPathInfo)(hdfsFS, const char*);
  hdfsFileInfo* (*ListDirectory)(hdfsFS, const char*, int*);
  void (*FreeFileInfo)(hdfsFileInfo*, int);
  int (*CreateDirectory)(hdfsFS, const char*);
  int (*Delete)(hdfsFS, const char*, int);
  int (*Rename)(hdfsFS, const char*, const char*);
};

std::string Env(const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

template <typename T>
bool Bind(void* lib, const char* name, T* fn, std::string* error) {
  *fn = reinterpret_cast<T>(dlsym(lib, name));
  if (*fn == nullptr && error->empty()) error->assign(std::string("libhdfs lacks ") + name);
  return *fn != nullptr;
}

void LoadInto(LibHdfs* h) {
  std::vector<std::string> tried;
  std::string explicit_path = Env("TFYARN_LIBHDFS");
  if (!explicit_path.empty()) tried.push_back(explicit_path);
  for (const char* home : {"HADOOP_HDFS_HOME", "HADOOP_HOME"}) {
    if (!Env(home).empty()) tried.push_back(Env(home) + "/lib/native/libhdfs.so");
  }
  tried.push_back("libhdfs.so");
  void* lib = nullptr;
  std::string why;
  for (const auto& path : tried) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    why += "\n  " + path + ": " + dlerror();
  }
  if (lib == nullptr) {
    h->error = "cannot load libhdfs for hdfs:// (set HADOOP_HDFS_HOME or HADOOP_HOME so "
               "lib/native/libhdfs.so exists, and LD_LIBRARY_PATH to the directory of "
               "libjvm.so, e.g. $JAVA_HOME/lib/server); tried:" + why;
    return;
  }
  if (explicit_path.empty() && Env("CLASSPATH").empty()) {
    h->error = "CLASSPATH is empty: libhdfs needs Hadoop's jars; export "
               "CLASSPATH=$(hadoop classpath --glob)";
    return;
  }
  std::string& e = h->error;
  Bind(lib, "hdfsNewBuilder", &h->NewBuilder, &e);
  Bind(lib, "hdfsBuilderSetNameNode", &h->BuilderSetNameNode, &e);
  Bind(lib, "hdfsBuilderConnect", &h->BuilderConnect, &e);
  Bind(lib, "hdfsOpenFile", &h->OpenFile, &e);
  Bind(lib, "hdfsCloseFile", &h->CloseFile, &e);
  Bind(lib, "hdfsPread", &h->Pread, &e);
  Bind(lib, "hdfsWrite", &h->Write, &e);
  Bind(lib, "hdfsHFlush", &h->HFlush, &e);
  Bind(lib, "hdfsHSync", &h->HSync, &e);
  Bind(lib, "hdfsExists", &h->Exists, &e);
  Bind(lib, "hdfsGetPathInfo", &h->GetPathInfo, &e);
  Bind(lib, "hdfsListDirectory", &h->ListDirectory, &e);
  Bind(lib, "hdfsFreeFileInfo", &h->FreeFileInfo, &e);
  Bind(lib, "hdfsCreateDirectory", &h->CreateDirectory, &e);
  Bind(lib, "hdfsDelete", &h->Delete, &e);
  Bind(lib, "hdfsRename", &h->Rename, &e);
}

// Loaded once, at the first hdfs:// call; nullptr (with `status` set) when unusable.
const LibHdfs* Lib(TF_Status* status) {
  static LibHdfs lib;
  static std::once_flag once;
  std::call_once(once, [] { LoadInto(&lib); });
  if (!lib.error.empty()) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION, lib.error.c_str());
    return nullptr;
  }
  return &lib;
}

// ---------------------------------------------------------------- paths and connections

// "hdfs://nn:9000/a/b" -> ("hdfs://nn:9000", "/a/b"); "hdfs:///a" -> ("default", "/a").
void SplitUri(const std::string& uri, std::string* namenode, std::string* path) {
  size_t scheme_end = uri.find("://");
  if (scheme_end == std::string::npos) {
    *namenode = "default";
    *path = uri;
    return;
  }
  size_t host_start = scheme_end + 3;
  size_t path_start = uri.find('/', host_start);
  std::string authority = uri.substr(host_start, path_start == std::string::npos
                                                     ? std::string::npos
                                                     : path_start - host_start);
  *path = path_start == std::string::npos ? "/" : uri.substr(path_start);
  std::string scheme = uri.substr(0, scheme_end);
  *namenode = authority.empty() && scheme == "hdfs" ? "default" : scheme + "://" + authority;
}

struct Connections {
  std::mutex mu;
  std::map<std::string, hdfsFS> by_namenode;
};

void SetErrno(TF_Status* status, const std::string& what, const std::string& path) {
  int err = errno;
  TF_Code code = err == ENOENT    ? TF_NOT_FOUND
                 : err == EACCES  ? TF_PERMISSION_DENIED
                 : err == EEXIST  ? TF_ALREADY_EXISTS
                 : err == ENOTDIR ? TF_FAILED_PRECONDITION
                                  : TF_INTERNAL;
  std::string msg = what + " " + path + ": " + (err ? strerror(err) : "libhdfs failed") +
                    " (errno " + std::to_string(err) + "; see the JVM's stderr for the Java "
                    "exception)";
  TF_SetStatus(status, code, msg.c_str());
}

// The connection for `uri` (one per namenode, kept), and the path part of it.
hdfsFS Connect(const TF_Filesystem* filesystem, const char* uri, std::string* path,
               TF_Status* status) {
  const LibHdfs* lib = Lib(status);
  if (lib == nullptr) return nullptr;
  std::string namenode;
  SplitUri(uri, &namenode, path);
  auto* conns = static_cast<Connections*>(filesystem->plugin_filesystem);
  std::lock_guard<std::mutex> lock(conns->mu);
  auto found = conns->by_namenode.find(namenode);
  if (found != conns->by_namenode.end()) return found->second;
  hdfsBuilder* builder = lib->NewBuilder();
  lib->BuilderSetNameNode(builder, namenode.c_str());
  errno = 0;
  hdfsFS fs = lib->BuilderConnect(builder);
  if (fs == nullptr) {
    SetErrno(status, "cannot connect to the namenode " + namenode + " for", uri);
    return nullptr;
  }
  conns->by_namenode[namenode] = fs;
  return fs;
}

char* Strdup(const std::string& s) {
  char* out = static_cast<char*>(malloc(s.size() + 1));
  memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// ---------------------------------------------------------------- files

struct OpenFile {
  hdfsFS fs;
  hdfsFile file;
  std::string path;
  int64_t position;  // writable files: bytes written so far (what tell reports)
};

void RandomCleanup(TF_RandomAccessFile* file) {
  auto* f = static_cast<OpenFile*>(file->plugin_file);
  TF_Status* ignored = TF_NewStatus();
  if (const LibHdfs* lib = Lib(ignored)) lib->CloseFile(f->fs, f->file);
  TF_DeleteStatus(ignored);
  delete f;
}

int64_t RandomRead(const TF_RandomAccessFile* file, uint64_t offset, size_t n, char* buffer,
                   TF_Status* status) {
  auto* f = static_cast<OpenFile*>(file->plugin_file);
  const LibHdfs* lib = Lib(status);
  if (lib == nullptr) return -1;
  size_t done = 0;
  while (done < n) {
    size_t chunk = n - done > (1u << 30) ? (1u << 30) : n - done;
    errno = 0;
    int32_t got = lib->Pread(f->fs, f->file, static_cast<int64_t>(offset + done), buffer + done,
                             static_cast<int32_t>(chunk));
    if (got > 0) {
      done += got;
    } else if (got == 0) {
      TF_SetStatus(status, TF_OUT_OF_RANGE, "read past the end of the file");
      return static_cast<int64_t>(done);
    } else if (errno != EINTR && errno != EAGAIN) {
      SetErrno(status, "cannot read", f->path);
      return -1;
    }
  }
  TF_SetStatus(status, TF_OK, "");
  return static_cast<int64_t>(done);
}

void WritableCleanup(TF_WritableFile* file) {
  auto* f = static_cast<OpenFile*>(file->plugin_file);
  if (f->file != nullptr) {
    TF_Status* ignored = TF_NewStatus();
    if (const LibHdfs* lib = Lib(ignored)) lib->CloseFile(f->fs, f->file);
    TF_DeleteStatus(ignored);
  }
  delete f;
}

// Writable ops after close fail cleanly (TF closes explicitly, then again on destruction).
bool Closed(const OpenFile* f, TF_Status* status) {
  if (f->file != nullptr) return false;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, (f->path + " is already closed").c_str());
  return true;
}

void Append(const TF_WritableFile* file, const char* buffer, size_t n, TF_Status* status) {
  auto* f = static_cast<OpenFile*>(file->plugin_file);
  const LibHdfs* lib = Lib(status);
  if (lib == nullptr || Closed(f, status)) return;
  size_t done = 0;
  while (done < n) {
    size_t chunk = n - done > (1u << 30) ? (1u << 30) : n - done;
    errno = 0;
    int32_t put = lib->Write(f->fs, f->file, buffer + done, static_cast<int32_t>(chunk));
    if (put < 0 && errno != EINTR) {
      SetErrno(status, "cannot write", f->path);
      return;
    }
    if (put > 0) done += put;
  }
  f->position += static_cast<int64_t>(n);
  TF_SetStatus(status, TF_OK, "");
}

int64_t Tell(const TF_WritableFile* file, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  return static_cast<OpenFile*>(file->plugin_file)->position;
}

// Flush (hflush: readers see the data) or sync (hsync: on the datanodes' disks).
void Push(const TF_WritableFile* file, TF_Status* status, bool to_disk) {
  auto* f = static_cast<OpenFile*>(file->plugin_file);
  const LibHdfs* lib = Lib(status);
  if (lib == nullptr || Closed(f, status)) return;
  errno = 0;
  int rc = to_disk ? lib->HSync(f->fs, f->file) : lib->HFlush(f->fs, f->file);
  if (rc != 0) return SetErrno(status, to_disk ? "cannot sync" : "cannot flush", f->path);
  TF_SetStatus(status, TF_OK, "");
}

void Flush(const TF_WritableFile* file, TF_Status* status) { Push(file, status, false); }

void Sync(const TF_WritableFile* file, TF_Status* status) { Push(file, status, true); }

void Close(const TF_WritableFile* file, TF_Status* status) {
  auto* f = static_cast<OpenFile*>(file->plugin_file);
  const LibHdfs* lib = Lib(status);
  if (lib == nullptr) return;
  if (f->file == nullptr) return TF_SetStatus(status, TF_OK, "");  // closed already: no-op
  errno = 0;
  int rc = lib->CloseFile(f->fs, f->file);
  f->file = nullptr;
  if (rc != 0) return SetErrno(status, "cannot close", f->path);
  TF_SetStatus(status, TF_OK, "");
}

// ---------------------------------------------------------------- the filesystem

void Init(TF_Filesystem* filesystem, TF_Status* status) {
  filesystem->plugin_filesystem = new Connections();
  TF_SetStatus(status, TF_OK, "");
}

void Cleanup(TF_Filesystem* filesystem) {
  delete static_cast<Connections*>(filesystem->plugin_filesystem);
}

// Stat of `uri`; false (with `status` set) when it cannot be had.
bool Info(const TF_Filesystem* filesystem, const char* uri, TF_FileStatistics* stats,
          TF_Status* status) {
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  if (fs == nullptr) return false;
  const LibHdfs* lib = Lib(status);
  errno = 0;
  hdfsFileInfo* info = lib->GetPathInfo(fs, path.c_str());
  if (info == nullptr) {
    if (errno == 0) errno = ENOENT;
    SetErrno(status, "cannot stat", uri);
    return false;
  }
  stats->length = info->mSize;
  stats->mtime_nsec = static_cast<int64_t>(info->mLastMod) * 1000000000;
  stats->is_directory = info->mKind == 'D';
  lib->FreeFileInfo(info, 1);
  TF_SetStatus(status, TF_OK, "");
  return true;
}

void Stat(const TF_Filesystem* filesystem, const char* uri, TF_FileStatistics* stats,
          TF_Status* status) {
  Info(filesystem, uri, stats, status);
}

void NewRandomAccessFile(const TF_Filesystem* filesystem, const char* uri,
                         TF_RandomAccessFile* file, TF_Status* status) {
  TF_FileStatistics stats;
  if (!Info(filesystem, uri, &stats, status)) return;
  if (stats.is_directory) {
    return TF_SetStatus(status, TF_FAILED_PRECONDITION, (std::string(uri) + " is a directory")
                                                            .c_str());
  }
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  errno = 0;
  hdfsFile f = Lib(status)->OpenFile(fs, path.c_str(), O_RDONLY, 0, 0, 0);
  if (f == nullptr) return SetErrno(status, "cannot open", uri);
  file->plugin_file = new OpenFile{fs, f, uri, 0};
  TF_SetStatus(status, TF_OK, "");
}

void OpenForWrite(const TF_Filesystem* filesystem, const char* uri, TF_WritableFile* file,
                  bool append, TF_Status* status) {
  TF_FileStatistics stats{0, 0, false};
  bool exists = append && Info(filesystem, uri, &stats, status);
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  if (fs == nullptr) return;
  int flags = exists ? (O_WRONLY | O_APPEND) : O_WRONLY;
  errno = 0;
  hdfsFile f = Lib(status)->OpenFile(fs, path.c_str(), flags, 0, 0, 0);
  if (f == nullptr) return SetErrno(status, "cannot open for writing", uri);
  file->plugin_file = new OpenFile{fs, f, uri, exists ? stats.length : 0};
  TF_SetStatus(status, TF_OK, "");
}

void NewWritableFile(const TF_Filesystem* filesystem, const char* uri, TF_WritableFile* file,
                     TF_Status* status) {
  OpenForWrite(filesystem, uri, file, false, status);
}

void NewAppendableFile(const TF_Filesystem* filesystem, const char* uri,
                       TF_WritableFile* file, TF_Status* status) {
  OpenForWrite(filesystem, uri, file, true, status);
}

void PathExists(const TF_Filesystem* filesystem, const char* uri, TF_Status* status) {
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  if (fs == nullptr) return;
  if (Lib(status)->Exists(fs, path.c_str()) == 0) return TF_SetStatus(status, TF_OK, "");
  TF_SetStatus(status, TF_NOT_FOUND, (std::string(uri) + " not found").c_str());
}

bool IsDirectory(const TF_Filesystem* filesystem, const char* uri, TF_Status* status) {
  TF_FileStatistics stats;
  if (!Info(filesystem, uri, &stats, status)) return false;
  if (!stats.is_directory) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION, (std::string(uri) + " is a file").c_str());
  }
  return stats.is_directory;
}

int64_t GetFileSize(const TF_Filesystem* filesystem, const char* uri, TF_Status* status) {
  TF_FileStatistics stats;
  if (!Info(filesystem, uri, &stats, status)) return -1;
  if (stats.is_directory) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION, (std::string(uri) + " is a directory").c_str());
    return -1;
  }
  return stats.length;
}

void CreateDir(const TF_Filesystem* filesystem, const char* uri, TF_Status* status) {
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  if (fs == nullptr) return;
  const LibHdfs* lib = Lib(status);
  if (lib->Exists(fs, path.c_str()) == 0) {
    return TF_SetStatus(status, TF_ALREADY_EXISTS, (std::string(uri) + " exists").c_str());
  }
  errno = 0;
  if (lib->CreateDirectory(fs, path.c_str()) != 0) return SetErrno(status, "cannot mkdir", uri);
  TF_SetStatus(status, TF_OK, "");
}

void RecursivelyCreateDir(const TF_Filesystem* filesystem, const char* uri,
                          TF_Status* status) {
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  if (fs == nullptr) return;
  errno = 0;  // libhdfs's mkdir is `mkdir -p`
  if (Lib(status)->CreateDirectory(fs, path.c_str()) != 0) {
    return SetErrno(status, "cannot mkdir", uri);
  }
  TF_SetStatus(status, TF_OK, "");
}

void Remove(const TF_Filesystem* filesystem, const char* uri, bool want_dir, TF_Status* status) {
  TF_FileStatistics stats;
  if (!Info(filesystem, uri, &stats, status)) return;
  if (stats.is_directory != want_dir) {
    return TF_SetStatus(status, TF_FAILED_PRECONDITION,
                        (std::string(uri) + (want_dir ? " is a file" : " is a directory"))
                            .c_str());
  }
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  errno = 0;
  if (Lib(status)->Delete(fs, path.c_str(), 0) != 0) return SetErrno(status, "cannot delete", uri);
  TF_SetStatus(status, TF_OK, "");
}

void DeleteFile(const TF_Filesystem* filesystem, const char* uri, TF_Status* status) {
  Remove(filesystem, uri, false, status);
}

void DeleteDir(const TF_Filesystem* filesystem, const char* uri, TF_Status* status) {
  Remove(filesystem, uri, true, status);
}

void DeleteRecursively(const TF_Filesystem* filesystem, const char* uri,
                       uint64_t* undeleted_files, uint64_t* undeleted_dirs, TF_Status* status) {
  *undeleted_files = 0;
  *undeleted_dirs = 0;
  TF_FileStatistics stats;
  if (!Info(filesystem, uri, &stats, status)) {
    *undeleted_dirs = 1;
    return;
  }
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  errno = 0;
  if (Lib(status)->Delete(fs, path.c_str(), 1) != 0) {
    *undeleted_dirs = 1;
    return SetErrno(status, "cannot delete", uri);
  }
  TF_SetStatus(status, TF_OK, "");
}

void RenameFile(const TF_Filesystem* filesystem, const char* src, const char* dst,
                TF_Status* status) {
  std::string from, to;
  hdfsFS fs = Connect(filesystem, src, &from, status);
  if (fs == nullptr) return;
  Connect(filesystem, dst, &to, status);
  const LibHdfs* lib = Lib(status);
  TF_FileStatistics stats;
  TF_Status* probe = TF_NewStatus();
  if (Info(filesystem, dst, &stats, probe) && !stats.is_directory) {
    lib->Delete(fs, to.c_str(), 0);  // TF's rename replaces an existing file
  }
  TF_DeleteStatus(probe);
  errno = 0;
  if (lib->Rename(fs, from.c_str(), to.c_str()) != 0) {
    return SetErrno(status, "cannot rename to " + std::string(dst) + ":", src);
  }
  TF_SetStatus(status, TF_OK, "");
}

int GetChildren(const TF_Filesystem* filesystem, const char* uri, char*** entries,
                TF_Status* status) {
  if (!IsDirectory(filesystem, uri, status)) return -1;
  std::string path;
  hdfsFS fs = Connect(filesystem, uri, &path, status);
  const LibHdfs* lib = Lib(status);
  int n = 0;
  errno = 0;
  hdfsFileInfo* infos = lib->ListDirectory(fs, path.c_str(), &n);
  if (infos == nullptr && errno != 0) {
    SetErrno(status, "cannot list", uri);
    return -1;
  }
  *entries = static_cast<char**>(malloc(sizeof(char*) * (n > 0 ? n : 1)));
  for (int i = 0; i < n; ++i) {
    std::string name = infos[i].mName;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    (*entries)[i] = Strdup(name.substr(name.rfind('/') + 1));
  }
  if (infos != nullptr) lib->FreeFileInfo(infos, n);
  TF_SetStatus(status, TF_OK, "");
  return n;
}

// The full URI: TF's default would drop the scheme and the namenode.
char* TranslateName(const TF_Filesystem* filesystem, const char* uri) { return Strdup(uri); }

void* Allocate(size_t size) { return malloc(size); }

template <typename T>
T* Zeroed(size_t size) {
  return static_cast<T*>(calloc(1, size));
}

void ProvideFilesystemSupportFor(TF_FilesystemPluginOps* ops, const char* scheme) {
  TF_SetFilesystemVersionMetadata(ops);
  ops->scheme = Strdup(scheme);

  ops->random_access_file_ops = Zeroed<TF_RandomAccessFileOps>(TF_RANDOM_ACCESS_FILE_OPS_SIZE);
  ops->random_access_file_ops->cleanup = RandomCleanup;
  ops->random_access_file_ops->read = RandomRead;

  ops->writable_file_ops = Zeroed<TF_WritableFileOps>(TF_WRITABLE_FILE_OPS_SIZE);
  ops->writable_file_ops->cleanup = WritableCleanup;
  ops->writable_file_ops->append = Append;
  ops->writable_file_ops->tell = Tell;
  ops->writable_file_ops->flush = Flush;
  ops->writable_file_ops->sync = Sync;
  ops->writable_file_ops->close = Close;

  TF_FilesystemOps* fs = Zeroed<TF_FilesystemOps>(TF_FILESYSTEM_OPS_SIZE);
  ops->filesystem_ops = fs;
  fs->init = Init;
  fs->cleanup = Cleanup;
  fs->new_random_access_file = NewRandomAccessFile;
  fs->new_writable_file = NewWritableFile;
  fs->new_appendable_file = NewAppendableFile;
  fs->create_dir = CreateDir;
  fs->recursively_create_dir = RecursivelyCreateDir;
  fs->delete_file = DeleteFile;
  fs->delete_dir = DeleteDir;
  fs->delete_recursively = DeleteRecursively;
  fs->rename_file = RenameFile;
  fs->path_exists = PathExists;
  fs->stat = Stat;
  fs->is_directory = IsDirectory;
  fs->get_file_size = GetFileSize;
  fs->translate_name = TranslateName;
  fs->get_children = GetChildren;  // TF's default glob walks these
}

}  // namespace

extern "C" TF_CAPI_EXPORT void TF_InitPlugin(TF_FilesystemPluginInfo* info) {
  info->plugin_memory_allocate = Allocate;
  info->plugin_memory_free = free;
  info->num_schemes = 2;
  // zeroed: the ops left unset (read-only memory regions) must be null, not garbage
  info->ops = Zeroed<TF_FilesystemPluginOps>(info->num_schemes * sizeof(TF_FilesystemPluginOps));
  ProvideFilesystemSupportFor(&info->ops[0], "hdfs");
  ProvideFilesystemSupportFor(&info->ops[1], "viewfs");
}
