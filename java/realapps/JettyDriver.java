package realapps;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;

import org.eclipse.jetty.server.Request;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.server.handler.AbstractHandler;
import org.eclipse.jetty.util.thread.QueuedThreadPool;

/**
 * Jetty 9 (Debian's libjetty9-java) embedded, serving one handler on a loopback port of its own
 * choosing, loaded by CLIENTS client threads of ours that send REQUESTS requests in all over
 * HttpURLConnection (kept-alive connections) and check every response's body against the
 * answer computed on the client's side.
 *
 * <p>Usage: {@code java -cp jetty9-*.jar:servlet-api.jar:CLASSES realapps.JettyDriver REQUESTS CLIENTS}.
 * Prints {@code requests=N failures=0 body_sum=S ok}. Each request is one call of
 * {@link Sum#handle}, so a profile that counts calls must find exactly REQUESTS of them.
 */
public class JettyDriver {
    /** What {@code /sum?n=N} answers: the sum 1 + ... + N, and N's square, computed by a loop. */
    static String answer(int n) {
        long sum = 0;
        for (int i = 1; i <= n; i++) {
            sum += i;
        }
        return "n=" + n + " sum=" + sum + " square=" + ((long) n * n) + "\n";
    }

    /** The request's n for request number {@code i}. */
    static int nOf(int i) {
        return (int) ((i * 37L) % 5000) + 1;
    }

    /** The handler: {@code /sum?n=N}; anything else is a 404. */
    static class Sum extends AbstractHandler {
        final AtomicLong served = new AtomicLong();

        @Override
        public void handle(String target, Request base, HttpServletRequest request,
                HttpServletResponse response) throws IOException {
            if (!"/sum".equals(target)) {
                return;
            }
            int n = Integer.parseInt(request.getParameter("n"));
            byte[] body = answer(n).getBytes(StandardCharsets.UTF_8);
            response.setStatus(200);
            response.setContentType("text/plain; charset=utf-8");
            response.setContentLength(body.length);
            response.getOutputStream().write(body);
            served.incrementAndGet();
            base.setHandled(true);
        }
    }

    static String get(URL url) throws IOException {
        HttpURLConnection connection = (HttpURLConnection) url.openConnection();
        int status = connection.getResponseCode();
        try (InputStream in = status == 200 ? connection.getInputStream() : connection.getErrorStream()) {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            if (in != null) {
                in.transferTo(bytes);
            }
            return status + " " + bytes.toString(StandardCharsets.UTF_8);
        }
    }

    public static void main(String[] args) throws Exception {
        int requests = Integer.parseInt(args[0]);
        int clients = Integer.parseInt(args[1]);
        QueuedThreadPool pool = new QueuedThreadPool(8, 2);
        pool.setName("jetty");
        Server server = new Server(pool);
        ServerConnector connector = new ServerConnector(server, 1, 1);
        connector.setHost("127.0.0.1");
        connector.setPort(0);
        server.addConnector(connector);
        Sum handler = new Sum();
        server.setHandler(handler);
        server.start();
        int port = connector.getLocalPort();

        AtomicLong failures = new AtomicLong();
        AtomicLong bodySum = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < clients; c++) {
            final int client = c;
            Thread thread = new Thread(() -> {
                for (int i = client; i < requests; i += clients) {
                    int n = nOf(i);
                    try {
                        String got = get(new URL("http://127.0.0.1:" + port + "/sum?n=" + n));
                        if (got.equals("200 " + answer(n))) {
                            bodySum.addAndGet(n);
                        } else {
                            failures.incrementAndGet();
                            System.err.println("request " + i + ": " + got);
                        }
                    } catch (IOException e) {
                        failures.incrementAndGet();
                        System.err.println("request " + i + ": " + e);
                    }
                }
            }, "client-" + c);
            threads.add(thread);
            thread.start();
        }
        for (Thread thread : threads) {
            thread.join();
        }
        server.stop();
        long expected = 0;
        for (int i = 0; i < requests; i++) {
            expected += nOf(i);
        }
        boolean ok = failures.get() == 0 && bodySum.get() == expected
                && handler.served.get() == requests;
        System.out.println("requests=" + requests + " failures=" + failures.get() + " served="
                + handler.served.get() + " body_sum=" + bodySum.get() + (ok ? " ok" : " WRONG"));
        System.exit(ok ? 0 : 3);
    }
}
