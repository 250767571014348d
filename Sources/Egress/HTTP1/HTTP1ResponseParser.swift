import NIOCore

/// Reads HTTP/1.1 answers (RFC 9112) from a connection's bytes, as the relay needs them:
/// status, `Retry-After`, whether the connection stays open, and the body, framed by
/// `Content-Length`, chunked transfer coding, or the end of the connection. Informational
/// answers (1xx) are skipped. A value, fed on the connection's event loop.
struct HTTP1ResponseParser {
    enum Event: Equatable {
        /// The final answer's head.
        case head(status: Int, retryAfter: String?, keepAlive: Bool)
        case body(ByteBuffer)
        /// The answer ended; `leftover` says bytes followed it (a server out of step).
        case end(leftover: Bool)
    }

    struct Failure: Error, Equatable, CustomStringConvertible {
        let reason: String
        var description: String { reason }
    }

    /// A head larger than this is refused: answers are a status line and a few headers.
    static let maximumHeadBytes = 64 * 1024
    private static let maximumChunkSizeLine = 1024

    private enum Framing: Equatable {
        case length(Int)
        case chunkSize
        case chunkData(Int)
        case chunkDataEnd
        case trailers
        case untilClose
    }

    private enum State: Equatable {
        case head
        case body(Framing)
        case done
    }

    private var state = State.head
    private var buffered = ByteBuffer()

    /// The answer whose body runs to the end of the connection is complete when it closes.
    var endsWithConnection: Bool { state == .body(.untilClose) }

    /// Starts over for the next request on the same connection.
    mutating func reset() {
        state = .head
        buffered.clear()
    }

    /// Consumes `bytes` and returns what they completed, in order.
    mutating func feed(_ bytes: inout ByteBuffer) throws(Failure) -> [Event] {
        guard state != .done else { throw Failure(reason: "bytes after the end of the answer") }
        if buffered.readableBytes == 0 { buffered = bytes } else { buffered.writeBuffer(&bytes) }
        bytes.moveReaderIndex(to: bytes.writerIndex)
        var events: [Event] = []
        while try step(&events) {}
        if state == .done, buffered.readableBytes > 0 {
            events[events.count - 1] = .end(leftover: true)
            buffered.clear()
        }
        return events
    }

    /// One step of progress; false when more bytes are needed or the answer is complete.
    private mutating func step(_ events: inout [Event]) throws(Failure) -> Bool {
        switch state {
        case .done:
            return false
        case .head:
            guard let head = try takeHead() else { return false }
            if head.status < 200 { return true }  // 100 Continue and friends: the real answer follows
            events.append(.head(status: head.status, retryAfter: head.retryAfter, keepAlive: head.keepAlive))
            state = head.framing.map { .body($0) } ?? .done
            if state == .done { events.append(.end(leftover: false)) }
            return state != .done
        case .body(let framing):
            return try stepBody(framing, &events)
        }
    }

    private mutating func stepBody(_ framing: Framing, _ events: inout [Event]) throws(Failure) -> Bool {
        switch framing {
        case .length(let remaining):
            guard buffered.readableBytes > 0 else { return false }
            let slice = buffered.readSlice(length: min(remaining, buffered.readableBytes))!
            events.append(.body(slice))
            finishOrContinue(remaining - slice.readableBytes, &events) { .length($0) }
            return state != .done
        case .untilClose:
            if buffered.readableBytes > 0 { events.append(.body(buffered.readSlice(length: buffered.readableBytes)!)) }
            return false
        case .chunkSize:
            guard let line = try takeLine(limit: Self.maximumChunkSizeLine) else { return false }
            let size = try Self.chunkSize(line)
            state = .body(size == 0 ? .trailers : .chunkData(size))
            return true
        case .chunkData(let remaining):
            guard buffered.readableBytes > 0 else { return false }
            let slice = buffered.readSlice(length: min(remaining, buffered.readableBytes))!
            events.append(.body(slice))
            let left = remaining - slice.readableBytes
            state = .body(left == 0 ? .chunkDataEnd : .chunkData(left))
            return true
        case .chunkDataEnd:
            guard let first = buffered.getInteger(at: buffered.readerIndex, as: UInt8.self) else { return false }
            var length = 1
            if first == 13 {
                guard let second = buffered.getInteger(at: buffered.readerIndex + 1, as: UInt8.self) else { return false }
                guard second == 10 else { throw Failure(reason: "chunk data not followed by CRLF") }
                length = 2
            } else if first != 10 {
                throw Failure(reason: "chunk data not followed by CRLF")
            }
            buffered.moveReaderIndex(forwardBy: length)
            state = .body(.chunkSize)
            return true
        case .trailers:
            guard let line = try takeLine(limit: Self.maximumHeadBytes) else { return false }
            if line.isEmpty {
                state = .done
                events.append(.end(leftover: false))
                return false
            }
            return true
        }
    }

    private mutating func finishOrContinue(_ remaining: Int, _ events: inout [Event], _ next: (Int) -> Framing) {
        if remaining == 0 {
            state = .done
            events.append(.end(leftover: false))
        } else {
            state = .body(next(remaining))
        }
    }

    // MARK: Head

    private struct Head {
        var status: Int
        var retryAfter: String?
        var keepAlive: Bool
        /// Nil: no body (204, 304, or an informational answer).
        var framing: Framing?
    }

    /// The status line and headers, once the empty line that ends them arrived.
    private mutating func takeHead() throws(Failure) -> Head? {
        guard let end = headEnd() else {
            if buffered.readableBytes > Self.maximumHeadBytes {
                throw Failure(reason: "response head larger than \(Self.maximumHeadBytes) bytes")
            }
            return nil
        }
        let text = buffered.readBytes(length: end)!
        buffered.moveReaderIndex(forwardBy: 4)
        var lines = text.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            line.last == UInt8(ascii: "\r") ? line.dropLast() : line
        }[...]
        var head = try Self.statusLine(lines.removeFirst())
        var contentLength: Int?
        var chunked = false
        var otherCoding = false
        var connectionTokens: [String] = []
        for line in lines {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex else {
                throw Failure(reason: "malformed header line")
            }
            let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
            let value = Self.trimmed(String(decoding: line[line.index(after: colon)...], as: UTF8.self))
            switch name {
            case "content-length":
                guard let length = Int(value), length >= 0, contentLength == nil || contentLength == length else {
                    throw Failure(reason: "invalid Content-Length \"\(value)\"")
                }
                contentLength = length
            case "transfer-encoding":
                let codings = value.lowercased().split(separator: ",").map { Self.trimmed(String($0)) }
                chunked = codings.last == "chunked"
                otherCoding = !chunked
            case "connection":
                connectionTokens += value.lowercased().split(separator: ",").map { Self.trimmed(String($0)) }
            case "retry-after":
                head.retryAfter = value
            default:
                break
            }
        }
        head.keepAlive = head.keepAlive ? !connectionTokens.contains("close") : connectionTokens.contains("keep-alive")
        if head.status < 200 || head.status == 204 || head.status == 304 {
            head.framing = nil
        } else if chunked {
            head.framing = .chunkSize
        } else if otherCoding {
            head.framing = .untilClose
        } else if let contentLength {
            head.framing = contentLength == 0 ? nil : .length(contentLength)
        } else {
            head.framing = .untilClose
        }
        if head.framing == .untilClose { head.keepAlive = false }
        return head
    }

    /// The offset of the CRLFCRLF that ends the head, from the reader index.
    private func headEnd() -> Int? {
        buffered.withUnsafeReadableBytes { bytes in
            guard bytes.count >= 4 else { return nil }
            for index in 0...(bytes.count - 4)
            where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
                return index
            }
            return nil
        }
    }

    /// `HTTP/1.x SSS reason`; HTTP/1.1 keeps the connection by default, HTTP/1.0 does not.
    private static func statusLine(_ line: ArraySlice<UInt8>) throws(Failure) -> Head {
        let parts = line.split(separator: UInt8(ascii: " "), maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].starts(with: Array("HTTP/1.".utf8)), parts[0].count == 8,
              parts[1].count == 3, let status = Int(String(decoding: parts[1], as: UTF8.self)), status >= 100
        else {
            throw Failure(reason: "malformed status line")
        }
        return Head(status: status, retryAfter: nil, keepAlive: parts[0].last == UInt8(ascii: "1"), framing: nil)
    }

    /// A line without its CRLF, once it arrived whole.
    private mutating func takeLine(limit: Int) throws(Failure) -> ArraySlice<UInt8>? {
        let newline = buffered.withUnsafeReadableBytes { $0.firstIndex(of: UInt8(ascii: "\n")) }
        guard let newline else {
            if buffered.readableBytes > limit { throw Failure(reason: "line longer than \(limit) bytes in the body framing") }
            return nil
        }
        var line = buffered.readBytes(length: newline + 1)![...].dropLast()
        if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
        return line
    }

    /// A chunk-size line: hexadecimal digits, then optional `;extensions`.
    private static func chunkSize(_ line: ArraySlice<UInt8>) throws(Failure) -> Int {
        let digits = line.prefix { $0 != UInt8(ascii: ";") }
        let text = trimmed(String(decoding: digits, as: UTF8.self))
        guard !text.isEmpty, text.count <= 15, let size = Int(text, radix: 16), size >= 0 else {
            throw Failure(reason: "malformed chunk size")
        }
        return size
    }

    private static func trimmed(_ text: String) -> String {
        var slice = Substring(text)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
