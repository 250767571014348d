extension Array where Element == UInt8 {
    /// Whether these bytes are exactly `text`'s UTF-8. The string's bytes are compared as
    /// contiguous memory: `elementsEqual` with its `utf8` view takes them one at a time, each
    /// through the view's index (half a percent of a backlog drain's CPU, twice per record).
    public func isUTF8(of text: String) -> Bool {
        let contiguous = text.utf8.withContiguousStorageIfAvailable { bytes in
            count == bytes.count && withUnsafeBufferPointer { $0.elementsEqual(bytes) }
        }
        return contiguous ?? elementsEqual(text.utf8)
    }
}
