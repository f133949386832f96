-- Demo schema for scripts/demo.sh and docker-compose.yml (mounted into the postgres container's
-- /docker-entrypoint-initdb.d). Safe to run twice.
CREATE TABLE IF NOT EXISTS public.demo_customers (
    id    serial PRIMARY KEY,
    name  text NOT NULL,
    email text
);

CREATE TABLE IF NOT EXISTS public.demo_orders (
    id          bigserial PRIMARY KEY,
    customer_id int NOT NULL,
    amount      numeric(10, 2) NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO public.demo_customers (name, email)
SELECT v.name, v.email
FROM (VALUES ('Ada Lovelace', 'ada@example.com'),
             ('Grace Hopper', 'grace@example.com'),
             ('Edsger Dijkstra', 'edsger@example.com')) AS v(name, email)
WHERE NOT EXISTS (SELECT 1 FROM public.demo_customers);

INSERT INTO public.demo_orders (customer_id, amount)
SELECT v.customer_id, v.amount
FROM (VALUES (1, 12.50), (1, 99.99), (2, 7.00), (3, 250.00)) AS v(customer_id, amount)
WHERE NOT EXISTS (SELECT 1 FROM public.demo_orders);
