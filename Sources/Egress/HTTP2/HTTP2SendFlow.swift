import NIOCore
import NIOHTTP2

/// What the server lets the relay send on one connection (RFC 9113 §5.1.2, §6.5.2, §6.9): how
/// many streams at once, how many body bytes per stream and for the whole connection, and how
/// large a frame. It decides when a started stream opens and how much of its body goes now;
/// `HTTP2StreamsHandler` writes what it says. Tests drive it without a socket.
struct HTTP2SendFlow {
    /// The windows until the server's SETTINGS and WINDOW_UPDATEs say otherwise.
    static let defaultWindow = 65_535
    private static let largestWindow = Int(Int32.max)

    /// SETTINGS_MAX_CONCURRENT_STREAMS: unlimited until announced.
    private(set) var streamLimit = Int.max
    private(set) var maximumFrameSize = HTTP2FrameReader.maximumFrameSize
    private var initialStreamWindow = Self.defaultWindow
    private var connectionWindow = Self.defaultWindow
    /// Open streams (HEADERS sent, not ended) and how many body bytes each may still send.
    private var streamWindows: [HTTP2StreamID: Int] = [:]
    /// Streams started beyond the limit, in stream order: they open as others end.
    private var waitingToOpen = CircularBuffer<HTTP2StreamID>()
    /// Open streams with body left that the windows hold back, in stream order.
    private var waitingForWindow: [HTTP2StreamID] = []
    /// The highest stream opened: the server may speak of no higher one.
    private(set) var highestOpened = HTTP2StreamID(0)

    var openStreams: Int { streamWindows.count }

    func isOpen(_ stream: HTTP2StreamID) -> Bool { streamWindows[stream] != nil }

    /// A stream started (stream IDs increase): true when it opens now, so its HEADERS go out;
    /// false when it waits for a stream to end.
    mutating func start(_ stream: HTTP2StreamID) -> Bool {
        guard streamWindows.count < streamLimit, waitingToOpen.isEmpty else {
            waitingToOpen.append(stream)
            return false
        }
        open(stream)
        return true
    }

    private mutating func open(_ stream: HTTP2StreamID) {
        streamWindows[stream] = initialStreamWindow
        highestOpened = stream
    }

    /// How many of the `remaining` body bytes of an open stream go now, in one DATA frame; the
    /// windows shrink by as much. 0 with bytes remaining: the windows are spent, and the stream
    /// is among those `windowsGrew` hands back once they are not.
    mutating func sendable(_ remaining: Int, on stream: HTTP2StreamID) -> Int {
        guard let window = streamWindows[stream] else { return 0 }
        let allowed = max(0, min(remaining, connectionWindow, window, maximumFrameSize))
        if allowed == 0, remaining > 0 {
            if !waitingForWindow.contains(stream) { waitingForWindow.append(stream) }
            return 0
        }
        connectionWindow -= allowed
        streamWindows[stream] = window - allowed
        return allowed
    }

    /// The stream ended (answered, failed or reset), open or still waiting: the streams that
    /// open in its place, in order.
    mutating func ended(_ stream: HTTP2StreamID) -> [HTTP2StreamID] {
        guard streamWindows.removeValue(forKey: stream) != nil else {
            if let index = waitingToOpen.firstIndex(of: stream) { waitingToOpen.remove(at: index) }
            return []
        }
        waitingForWindow.removeAll { $0 == stream }
        return openWaiting()
    }

    private mutating func openWaiting() -> [HTTP2StreamID] {
        var opened: [HTTP2StreamID] = []
        while streamWindows.count < streamLimit, let next = waitingToOpen.popFirst() {
            open(next)
            opened.append(next)
        }
        return opened
    }

    /// The streams held back for the windows, to send on; those still held back come back.
    mutating func windowsGrew() -> [HTTP2StreamID] {
        defer { waitingForWindow.removeAll() }
        return waitingForWindow
    }

    /// The server's SETTINGS. Returns the streams that open now that the limit allows them.
    mutating func receivedSettings(streamLimit: UInt32?, initialWindow: UInt32?,
                                   maximumFrameSize: UInt32?) throws(HTTP2ConnectionError) -> [HTTP2StreamID] {
        if let initialWindow {
            guard initialWindow <= Int32.max else { throw .init(code: .flowControlError, reason: "an initial window of \(initialWindow)") }
            // The change applies to the streams under way too (§6.9.2); a window may go negative.
            let change = Int(initialWindow) - initialStreamWindow
            initialStreamWindow = Int(initialWindow)
            for stream in streamWindows.keys { streamWindows[stream]! += change }
        }
        if let maximumFrameSize {
            guard (1 << 14)...((1 << 24) - 1) ~= maximumFrameSize else {
                throw .protocolError("a maximum frame size of \(maximumFrameSize)")
            }
            self.maximumFrameSize = Int(maximumFrameSize)
        }
        if let streamLimit { self.streamLimit = Int(streamLimit) }
        return openWaiting()
    }

    enum WindowUpdate: Equatable {
        /// The windows grew: send on the streams `windowsGrew` hands back.
        case grew
        /// A stream that ended meanwhile: nothing to do.
        case ignored
        /// The stream's update is invalid (0, or past 2^31−1): reset the stream (§6.9.1).
        case resetStream(String)
    }

    /// A WINDOW_UPDATE for the connection (the root stream) or a stream. An invalid one for
    /// the connection ends it.
    mutating func receivedWindowUpdate(_ increment: Int, on stream: HTTP2StreamID) throws(HTTP2ConnectionError) -> WindowUpdate {
        guard stream != .rootStream else {
            guard increment > 0 else { throw .protocolError("a connection window update of 0") }
            connectionWindow += increment
            guard connectionWindow <= Self.largestWindow else { throw .init(code: .flowControlError, reason: "a connection window past 2^31-1") }
            return .grew
        }
        guard let window = streamWindows[stream] else { return .ignored }
        guard increment > 0, window + increment <= Self.largestWindow else {
            return .resetStream("a window update of \(increment) on its stream")
        }
        streamWindows[stream] = window + increment
        return .grew
    }

    /// GOAWAY: the streams still waiting to open never will (§6.8); they leave, to be refused.
    mutating func receivedGoAway() -> [HTTP2StreamID] {
        defer { waitingToOpen.removeAll() }
        return Array(waitingToOpen)
    }
}
