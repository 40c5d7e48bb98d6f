// The host VmmProvider (host_vmm.h): reservations, pages and mappings with
// mmap and one memfd, so the KV cache's paging runs for real on the CPU.

#include "kvcache/host_vmm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace vpod::kvcache {
namespace {

std::string errno_message(int err) { return fmt::format("{} (errno {})", std::strerror(err), err); }

class HostFence final : public Fence {
 public:
  // Host code touches KV memory synchronously: once a call returns, nothing
  // reads the pages any more.
  Status record(void* /*stream*/) override { return {}; }
  Status wait() override { return {}; }
};

constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

}  // namespace

Result<std::unique_ptr<HostVmmProvider>> HostVmmProvider::create(std::size_t page_bytes) {
  const long os_page = sysconf(_SC_PAGESIZE);
  if (os_page <= 0) return internal_error("sysconf(_SC_PAGESIZE) failed");
  if (page_bytes == 0 || page_bytes % static_cast<std::size_t>(os_page) != 0) {
    return invalid_argument(
        fmt::format("host page size {} is not a positive multiple of the OS page size {}",
                    page_bytes, os_page));
  }
  const int fd = memfd_create("vpod-kv-pages", MFD_CLOEXEC);
  if (fd < 0) return unavailable("memfd_create: " + errno_message(errno));
  return std::unique_ptr<HostVmmProvider>(new HostVmmProvider(fd, page_bytes));
}

HostVmmProvider::~HostVmmProvider() { close(fd_); }

Result<void*> HostVmmProvider::reserve(std::size_t bytes) {
  VPOD_CHECK(bytes % page_bytes_ == 0);
  // Over-reserve by one page and trim, so the base is page_bytes-aligned as
  // CUDA reservations are.
  void* raw = mmap(nullptr, bytes + page_bytes_, PROT_NONE, kReserveFlags, -1, 0);
  if (raw == MAP_FAILED) {
    const int err = errno;
    return Status(err == ENOMEM ? StatusCode::resource_exhausted : StatusCode::internal,
                  fmt::format("mmap(PROT_NONE) reserving {} bytes: {}", bytes, errno_message(err)));
  }
  const auto raw_addr = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t base = (raw_addr + page_bytes_ - 1) / page_bytes_ * page_bytes_;
  const std::size_t head = base - raw_addr;
  const std::size_t tail = page_bytes_ - head;
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap(reinterpret_cast<void*>(base + bytes), tail);
  return reinterpret_cast<void*>(base);
}

void HostVmmProvider::free_reservation(void* base, std::size_t bytes) {
  VPOD_CHECK_MSG(munmap(base, bytes) == 0, "munmap of a reservation: " + errno_message(errno));
}

Result<PageHandle> HostVmmProvider::create_page() {
  std::lock_guard lock(mutex_);
  PageHandle offset = 0;
  bool reused = false;
  if (!free_extents_.empty()) {
    offset = free_extents_.back();
    reused = true;
  } else {
    offset = file_bytes_;
    if (ftruncate(fd_, static_cast<off_t>(file_bytes_ + page_bytes_)) != 0) {
      return resource_exhausted(fmt::format("ftruncate of the page memfd to {} bytes: {}",
                                            file_bytes_ + page_bytes_, errno_message(errno)));
    }
  }
  // Commit the memory now, as cuMemCreate does: running out shows up here,
  // when the pool is built, never as a SIGBUS on first touch.
  if (fallocate(fd_, 0, static_cast<off_t>(offset), static_cast<off_t>(page_bytes_)) != 0) {
    const int err = errno;
    if (!reused) {
      (void)ftruncate(fd_, static_cast<off_t>(file_bytes_));
    }
    return Status(
        err == ENOSPC || err == ENOMEM ? StatusCode::resource_exhausted : StatusCode::internal,
        fmt::format("fallocate of a {} byte page: {}", page_bytes_, errno_message(err)));
  }
  if (reused) {
    free_extents_.pop_back();
  } else {
    file_bytes_ += page_bytes_;
  }
  return offset;
}

void HostVmmProvider::release_page(PageHandle page) {
  std::lock_guard lock(mutex_);
  // Give the memory back; the extent is reused by the next create_page.
  const int rc = fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                           static_cast<off_t>(page), static_cast<off_t>(page_bytes_));
  VPOD_CHECK_MSG(rc == 0, "fallocate(PUNCH_HOLE): " + errno_message(errno));
  free_extents_.push_back(page);
}

Status HostVmmProvider::rereserve(void* addr, std::size_t bytes) {
  void* got = mmap(addr, bytes, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0);
  if (got == MAP_FAILED) {
    return internal_error(fmt::format("mmap(PROT_NONE, MAP_FIXED) over {} bytes at {}: {}", bytes,
                                      addr, errno_message(errno)));
  }
  return {};
}

Status HostVmmProvider::map(void* addr, std::span<const PageHandle> pages) {
  VPOD_CHECK(reinterpret_cast<std::uintptr_t>(addr) % page_bytes_ == 0);
  auto* base = static_cast<std::byte*>(addr);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    void* want = base + i * page_bytes_;
    void* got = mmap(want, page_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_,
                     static_cast<off_t>(pages[i]));
    if (got == MAP_FAILED) {
      const int err = errno;
      if (i > 0) VPOD_CHECK(rereserve(base, i * page_bytes_).ok());
      return Status(err == ENOMEM ? StatusCode::resource_exhausted : StatusCode::internal,
                    fmt::format("mmap(MAP_FIXED|MAP_SHARED) of page {} of {} at {}: {}", i + 1,
                                pages.size(), want, errno_message(err)));
    }
  }
  return {};
}

Status HostVmmProvider::unmap(void* addr, std::size_t num_pages) {
  return rereserve(addr, num_pages * page_bytes_);
}

Result<std::unique_ptr<Fence>> HostVmmProvider::create_fence() {
  return std::unique_ptr<Fence>(std::make_unique<HostFence>());
}

}  // namespace vpod::kvcache
