//===- MappedFile.cpp - Read-only memory-mapped file ----------------------===//

#include "compiler/frontend/MappedFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace llmc {

llmrt::StatusOr<std::shared_ptr<MappedFile>>
MappedFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return llmrt::not_found(path + ": no such file");
    return llmrt::invalid_argument(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return llmrt::invalid_argument(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return llmrt::invalid_argument(path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void *p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return llmrt::invalid_argument(path + ": mmap failed: " + std::strerror(err));
    }
    file->data_ = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_)
    ::munmap(const_cast<uint8_t *>(data_), size_);
}

llmrt::StatusOr<std::string> readTextFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return llmrt::not_found(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    return llmrt::invalid_argument(path + ": read error");
  return ss.str();
}

} // namespace llmc
