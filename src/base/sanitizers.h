// Which sanitizer this translation unit is built under, the same for GCC (which defines
// __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__) and clang (which answers __has_feature):
// PFSNET_UNDER_ASAN and PFSNET_UNDER_TSAN are 1 or 0.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define PFSNET_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PFSNET_UNDER_ASAN 1
#endif
#endif
#ifndef PFSNET_UNDER_ASAN
#define PFSNET_UNDER_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define PFSNET_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PFSNET_UNDER_TSAN 1
#endif
#endif
#ifndef PFSNET_UNDER_TSAN
#define PFSNET_UNDER_TSAN 0
#endif
