/* HD_API marks the public functions: exported from the shared library, which otherwise
 * hides every symbol, and plain declarations for users of the static library. */
#ifndef HD_EXPORT_H
#define HD_EXPORT_H

#if defined(HD_BUILDING_LIBRARY) && defined(__GNUC__)
#define HD_API __attribute__((visibility("default")))
#else
#define HD_API
#endif

#endif /* HD_EXPORT_H */
