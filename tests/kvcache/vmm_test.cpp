// The host VMM provider does real demand paging: these tests read the kernel's
// own view of the address space (/proc/self/maps) to check that reserved,
// mapped and unmapped ranges are what the provider says, and that data lives
// in the physical page (it follows the page to a new address).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kvcache/fault_injection.h"
#include "kvcache/host_vmm.h"
#include "kvcache/kv_store.h"
#include "kvcache/page_pool.h"
#include "kvcache/vmm.h"

namespace vpod::kvcache {
namespace {

constexpr std::size_t kPage = 64 * 1024;

// The permissions ("rw-s", "---p") of the mapping containing addr, or "" if
// the address is not mapped at all.
std::string protection_at(const void* addr) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms;
    in >> range >> perms;
    const auto dash = range.find('-');
    const std::uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const std::uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (a >= lo && a < hi) return perms;
  }
  return "";
}

std::shared_ptr<HostVmmProvider> host_provider(std::size_t page = kPage) {
  auto provider = HostVmmProvider::create(page);
  VPOD_CHECK(provider.ok());
  return std::shared_ptr<HostVmmProvider>(std::move(provider).value());
}

TEST(HostVmm, RejectsPageSizeThatIsNotAnOsPageMultiple) {
  auto provider = HostVmmProvider::create(4096 + 512);
  ASSERT_FALSE(provider.ok());
  EXPECT_EQ(provider.status().code(), StatusCode::invalid_argument);
}

TEST(HostVmm, ReservationIsAlignedAndInaccessibleUntilMapped) {
  auto provider = host_provider();
  auto range = VirtualRange::reserve(*provider, 3 * kPage + 1);  // rounds up to 4 pages
  ASSERT_TRUE(range.ok()) << range.status().to_string();
  EXPECT_EQ(range->bytes(), 4 * kPage);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(range->base()) % kPage, 0u);
  EXPECT_EQ(protection_at(range->base()), "---p");
  EXPECT_EQ(protection_at(range->base() + 4 * kPage - 1), "---p");

  auto page = PhysicalPage::create(*provider);
  ASSERT_TRUE(page.ok());
  Mapping mapping(*provider, range->base(), 4);
  const PageHandle handle = page->handle();
  ASSERT_TRUE(mapping.grow({&handle, 1}).ok());
  EXPECT_EQ(protection_at(range->base()), "rw-s");
  EXPECT_EQ(protection_at(range->base() + kPage), "---p");  // only the first page
  ASSERT_TRUE(mapping.shrink(1).ok());
  EXPECT_EQ(protection_at(range->base()), "---p");  // reserved again, not a hole
}

TEST(HostVmm, DataLivesInThePhysicalPageAcrossRemaps) {
  auto provider = host_provider();
  auto range = VirtualRange::reserve(*provider, 4 * kPage);
  ASSERT_TRUE(range.ok());
  auto a = PhysicalPage::create(*provider);
  auto b = PhysicalPage::create(*provider);
  ASSERT_TRUE(a.ok() && b.ok());
  std::byte* base = range->base();
  const PageHandle ha = a->handle();
  const PageHandle hb = b->handle();

  ASSERT_TRUE(provider->map(base, {&ha, 1}).ok());
  std::memset(base, 0x5a, kPage);
  ASSERT_TRUE(provider->unmap(base, 1).ok());
  // Page a, mapped somewhere else, still holds the bytes; page b is fresh.
  ASSERT_TRUE(provider->map(base + 2 * kPage, {&ha, 1}).ok());
  ASSERT_TRUE(provider->map(base, {&hb, 1}).ok());
  for (std::size_t i = 0; i < kPage; i += 4093) {
    ASSERT_EQ(std::to_integer<int>(base[2 * kPage + i]), 0x5a) << i;
    ASSERT_EQ(std::to_integer<int>(base[i]), 0) << i;
  }
  ASSERT_TRUE(provider->unmap(base, 1).ok());
  ASSERT_TRUE(provider->unmap(base + 2 * kPage, 1).ok());
}

TEST(HostVmm, PartialMapFailureUndoesTheMappedPrefix) {
  auto provider = host_provider();
  auto range = VirtualRange::reserve(*provider, 4 * kPage);
  ASSERT_TRUE(range.ok());
  auto a = PhysicalPage::create(*provider);
  auto b = PhysicalPage::create(*provider);
  ASSERT_TRUE(a.ok() && b.ok());
  // An offset that is not page-aligned makes mmap fail with EINVAL on the
  // third page, after two pages were really mapped.
  const PageHandle pages[3] = {a->handle(), b->handle(), 1};
  Mapping mapping(*provider, range->base(), 4);
  const Status status = mapping.grow(pages);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("page 3 of 3"), std::string::npos) << status.to_string();
  EXPECT_NE(status.message().find("Invalid argument"), std::string::npos) << status.to_string();
  EXPECT_EQ(mapping.num_pages(), 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(protection_at(range->base() + i * kPage), "---p") << i;
}

TEST(HostVmm, RaiiOwnersMoveAndReleaseOnce) {
  auto provider = host_provider();
  void* base = nullptr;
  {
    auto range = VirtualRange::reserve(*provider, kPage);
    ASSERT_TRUE(range.ok());
    VirtualRange moved = std::move(range).value();
    base = moved.base();
    VirtualRange assigned;
    assigned = std::move(moved);
    EXPECT_EQ(moved.base(), nullptr);  // NOLINT(bugprone-use-after-move): checks the move
    EXPECT_EQ(assigned.base(), base);
    EXPECT_EQ(protection_at(base), "---p");
  }
  EXPECT_NE(protection_at(base), "---p");  // freed exactly once, by the last owner

  auto range = VirtualRange::reserve(*provider, 2 * kPage);
  ASSERT_TRUE(range.ok());
  auto page = PhysicalPage::create(*provider);
  ASSERT_TRUE(page.ok());
  PhysicalPage owner = std::move(page).value();
  const PageHandle handle = owner.handle();
  {
    Mapping mapping(*provider, range->base(), 2);
    ASSERT_TRUE(mapping.grow({&handle, 1}).ok());
    Mapping other = std::move(mapping);
    EXPECT_EQ(other.num_pages(), 1u);
    EXPECT_EQ(protection_at(range->base()), "rw-s");
  }
  EXPECT_EQ(protection_at(range->base()), "---p");  // destructor unmapped
}

TEST(HostVmm, MappingRefusesToGrowPastItsRange) {
  auto provider = host_provider();
  auto range = VirtualRange::reserve(*provider, 2 * kPage);
  ASSERT_TRUE(range.ok());
  auto a = PhysicalPage::create(*provider);
  auto b = PhysicalPage::create(*provider);
  auto c = PhysicalPage::create(*provider);
  const PageHandle pages[3] = {a->handle(), b->handle(), c->handle()};
  Mapping mapping(*provider, range->base(), 2);
  const Status status = mapping.grow(pages);
  EXPECT_EQ(status.code(), StatusCode::out_of_range);
  EXPECT_EQ(mapping.num_pages(), 0u);
}

TEST(FaultInjection, FailsTheKthMapAndKeepsALedger) {
  auto inner = host_provider();
  FaultInjectingProvider provider(inner);
  auto range = VirtualRange::reserve(provider, 4 * kPage);
  ASSERT_TRUE(range.ok());
  auto a = PhysicalPage::create(provider);
  auto b = PhysicalPage::create(provider);
  ASSERT_TRUE(a.ok() && b.ok());
  const PageHandle ha = a->handle();
  const PageHandle hb = b->handle();
  provider.fail_map_call(2);
  Mapping mapping(provider, range->base(), 4);
  ASSERT_TRUE(mapping.grow({&ha, 1}).ok());
  const Status failed = mapping.grow({&hb, 1});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("injected fault"), std::string::npos);
  EXPECT_EQ(mapping.num_pages(), 1u);
  EXPECT_EQ(protection_at(range->base() + kPage), "---p");
  ASSERT_TRUE(mapping.grow({&hb, 1}).ok());  // one-shot

  // Mapping page a a second time (at another address) is legal VMM aliasing
  // (prefix caching shares pages so); the ledger tells it from an address
  // mapped twice.
  ASSERT_TRUE(provider.map(range->base() + 3 * kPage, {&ha, 1}).ok());
  FaultInjectingProvider::Ledger ledger = provider.ledger();
  EXPECT_EQ(ledger.shared_maps, 1);
  EXPECT_EQ(ledger.double_maps, 0);
  EXPECT_EQ(provider.mappings_of(ha), 2);
  EXPECT_EQ(ledger.pages_mapped_now, 3);
  EXPECT_EQ(ledger.injected_failures, 1);
  ASSERT_TRUE(provider.unmap(range->base() + 3 * kPage, 1).ok());
  ASSERT_TRUE(mapping.shrink(2).ok());
  ledger = provider.ledger();
  EXPECT_EQ(ledger.pages_mapped_now, 0);
  EXPECT_EQ(ledger.bad_unmaps, 0);
}

// Which pages are free (last in, first out) is the SlotLedger's:
// SlotLedger.HandsOutPagesLastInFirstOut (slot_ledger_test.cpp).
TEST(PagePoolTest, CreatesFloorOfBudget) {
  auto provider = host_provider();
  auto pool = PagePool::create(*provider, 5 * kPage + kPage / 2);
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  EXPECT_EQ(pool->num_pages(), 5);
  EXPECT_EQ(pool->page_bytes(), kPage);
}

TEST(PagePoolTest, ReportsWhichPageCouldNotBeCreated) {
  auto inner = host_provider();
  FaultInjectingProvider provider(inner);
  provider.fail_create_page_call(4);
  auto pool = PagePool::create(provider, 8 * kPage);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), StatusCode::resource_exhausted);
  EXPECT_NE(pool.status().message().find("creating KV page 4 of 8"), std::string::npos)
      << pool.status().to_string();
}

TEST(MemorySize, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(*parse_memory_size("4096"), 4096u);
  EXPECT_EQ(*parse_memory_size("512MiB"), 512u << 20);
  EXPECT_EQ(*parse_memory_size("96GiB"), std::size_t{96} << 30);
  EXPECT_EQ(*parse_memory_size("1.5GB"), 1500000000u);
  EXPECT_EQ(*parse_memory_size("2 KiB"), 2048u);
  EXPECT_FALSE(parse_memory_size("").ok());
  EXPECT_FALSE(parse_memory_size("GiB").ok());
  EXPECT_FALSE(parse_memory_size("12 parsecs").ok());
  EXPECT_FALSE(parse_memory_size("-5GiB").ok());
}

}  // namespace
}  // namespace vpod::kvcache
